//! Landlock, a second fence on writes (docs/security.md): the write rights are handled and
//! granted only beneath the paths of [`Rules`].
//!
//! Why three raw system calls and not the `landlock` crate: the rules name the sandbox's
//! own mounts (its private `/tmp`, the overlay at the workspace's path), so they can only
//! be made inside the new mount namespace, between fork and exec, where nothing may
//! allocate; the crate's rule constructors take `AsRef<Path>` and build errors holding a
//! `PathBuf`. Here every path is a `CStr` made before the fork.

use std::ffi::CString;
use std::os::fd::AsRawFd;

pub const WRITE_FILE: u64 = 1 << 1;
pub const REMOVE_DIR: u64 = 1 << 4;
pub const REMOVE_FILE: u64 = 1 << 5;
pub const MAKE_CHAR: u64 = 1 << 6;
pub const MAKE_DIR: u64 = 1 << 7;
pub const MAKE_REG: u64 = 1 << 8;
pub const MAKE_SOCK: u64 = 1 << 9;
pub const MAKE_FIFO: u64 = 1 << 10;
pub const MAKE_BLOCK: u64 = 1 << 11;
pub const MAKE_SYM: u64 = 1 << 12;
pub const REFER: u64 = 1 << 13;
pub const TRUNCATE: u64 = 1 << 14;

/// What Landlock is asked for: the ABI to use (0: none) and where writes stay allowed.
#[derive(Debug, Default)]
pub struct Rules {
    pub abi: i32,
    /// `(path, rights)`: a path missing in the sandbox (no `/run`) allows nothing.
    pub beneath: Vec<(CString, u64)>,
}

/// The write rights Landlock ABI `abi` knows.
pub fn writes(abi: i32) -> u64 {
    let mut r = WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    r
}

/// The Landlock ABI version of this kernel (0: none, or disabled).
#[allow(unsafe_code)]
pub fn abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query reads no memory (NULL attribute, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    v.max(0) as i32
}

/// Restrict this process (`no_new_privs` set): writes only beneath the rules' paths.
#[allow(unsafe_code)]
pub fn restrict(rules: &Rules) -> std::io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    let attr = RulesetAttr {
        handled_access_fs: writes(rules.abi),
    };
    // SAFETY: the attribute struct of the size given outlives the call, which reads it.
    let ruleset = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0 as libc::c_uint,
        )
    };
    if ruleset < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor; nothing else owns it.
    let ruleset = unsafe { OwnedFd::from_raw_fd(ruleset as libc::c_int) };
    for (path, access) in &rules.beneath {
        use rustix::fs::{Mode, OFlags};
        let Ok(dir) = rustix::fs::open(
            path.as_c_str(),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue; // not in this sandbox (no /run): nothing to allow
        };
        let rule = PathBeneath {
            allowed_access: *access,
            parent_fd: dir.as_raw_fd(),
        };
        // SAFETY: the rule struct outlives the call, which reads it; both descriptors are
        // open.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_PATH_BENEATH,
                &rule as *const PathBeneath,
                0 as libc::c_uint,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: a ruleset descriptor and no flags; no memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            ruleset.as_raw_fd(),
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
