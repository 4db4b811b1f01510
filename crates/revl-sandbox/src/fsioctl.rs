//! The one file-system call revl makes without a safe wrapper: a btrfs subvolume snapshot
//! (`BTRFS_IOC_SNAP_CREATE_V2`). FICLONE is rustix's `ioctl_ficlone`.

use std::os::fd::AsRawFd;

/// `_IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)`, the struct being 4096 bytes.
const SNAP_CREATE_V2: libc::c_ulong = 0x5000_9417;

#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; 4040],
}

/// The longest name a snapshot may have.
pub const NAME_MAX: usize = 4039;

/// Snapshot the subvolume open as `src` into the directory open as `parent`, named `name`
/// (at most [`NAME_MAX`] bytes).
#[allow(unsafe_code)]
pub fn btrfs_snapshot(
    src: &std::fs::File,
    parent: &std::fs::File,
    name: &[u8],
) -> std::io::Result<()> {
    if name.len() > NAME_MAX || name.contains(&0) {
        return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let mut args = VolArgsV2 {
        fd: src.as_raw_fd() as i64,
        transid: 0,
        flags: 0,
        unused: [0; 4],
        name: [0; 4040],
    };
    args.name[..name.len()].copy_from_slice(name);
    // SAFETY: a directory's descriptor and a properly sized, initialised argument struct
    // that outlives the call; the kernel reads it only.
    let r = unsafe {
        libc::ioctl(
            parent.as_raw_fd(),
            SNAP_CREATE_V2,
            &args as *const VolArgsV2,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
