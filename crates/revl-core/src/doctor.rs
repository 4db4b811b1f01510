//! `doctor` (SPEC 12): what this machine allows revl to do: the exec sandbox, and reflink
//! clones on the store's filesystem. Every check runs for real in a scratch directory of the
//! store, then is removed.

use serde::Serialize;
use std::path::Path;

/// One capability: available, or why not.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Check {
    fn from(r: Result<(), String>) -> Check {
        match r {
            Ok(()) => Check {
                available: true,
                why: None,
            },
            Err(why) => Check {
                available: false,
                why: Some(why),
            },
        }
    }
}

/// `{sandbox, reflink, root, scratch}`.
#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    pub sandbox: Check,
    /// Reflink (FICLONE) between two files of the store's filesystem.
    pub reflink: Check,
    /// Whether revl runs as root (else the sandbox needs a user namespace).
    pub root: bool,
    /// Where the checks ran (the store's scratch directory).
    pub scratch: String,
}

/// Run every check under `store_root/scratch/` (where exec's layers live); when there is
/// no store yet, in the system's temporary directory: a check creates no store.
pub fn check(store_root: &Path) -> Doctor {
    let base = if store_root.is_dir() {
        store_root.join("scratch")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("revl-doctor-{}", std::process::id()));
    let _ = crate::workspace::remove_any(&dir);
    let made =
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()));
    #[cfg(target_os = "linux")]
    let sandbox = made
        .clone()
        .and_then(|_| crate::sandbox::probe(&dir.join("sandbox")));
    #[cfg(not(target_os = "linux"))]
    let sandbox = Err("the sandbox needs Linux namespaces and overlayfs".to_string());
    let reflink = made.and_then(|_| reflink(&dir));
    let _ = crate::workspace::remove_any(&dir);
    Doctor {
        sandbox: Check::from(sandbox),
        reflink: Check::from(reflink),
        root: is_root(),
        scratch: dir.display().to_string(),
    }
}

fn is_root() -> bool {
    #[cfg(target_os = "linux")]
    {
        crate::sandbox::is_root()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

fn reflink(dir: &Path) -> Result<(), String> {
    let src = dir.join("reflink-src");
    let dst = dir.join("reflink-dst");
    std::fs::write(&src, b"revl reflink probe")
        .map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let from = std::fs::File::open(&src).map_err(|e| e.to_string())?;
    let to = std::fs::File::create(&dst).map_err(|e| e.to_string())?;
    rustix::fs::ioctl_ficlone(&to, &from).map_err(|e| {
        format!(
            "the filesystem of {} does not clone files (FICLONE: {e}); copies are made instead",
            dir.display()
        )
    })
}
