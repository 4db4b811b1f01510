//! Power-cut tests (placeholder while building).
#[test]
fn power_cut_placeholder() {
    let _ = revl_powercut::Disk::new();
}
