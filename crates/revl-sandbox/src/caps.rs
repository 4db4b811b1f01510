//! Capabilities (docs/security.md, "Capabilities"): `no_new_privs`, every capability
//! dropped from the bounding set, the ambient set cleared, and the effective, permitted and
//! inheritable sets cleared (what revl inherited included). Through rustix.

use rustix::thread::{CapabilitySet, CapabilitySets};

/// Set `no_new_privs`, drop every capability from the bounding set and clear the ambient
/// set.
pub fn drop_bounding() -> std::io::Result<()> {
    rustix::thread::set_no_new_privs(true)?;
    for cap in 0..64 {
        // EINVAL past the last capability this kernel knows.
        match rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(
            1 << cap,
        )) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::thread::clear_ambient_capability_set()?;
    Ok(())
}

/// Clear the effective, permitted and inheritable sets of this process.
pub fn clear() -> std::io::Result<()> {
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}
