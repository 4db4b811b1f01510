//! `doctor` (docs/user-guide.md, "Shell commands: `revl exec`"): what this machine allows
//! revl to do: the exec sandbox, and reflink clones on the store's filesystem. Every check
//! runs for real in a scratch directory of the store, then is removed.

use crate::sandbox::Stage;
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

/// The sandbox (docs/security.md): whether it works, each layer, and, where it is refused,
/// the likely reason on this machine with the exact fix.
#[derive(Debug, Clone, Serialize)]
pub struct Sandbox {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The exact fix for `why`, where revl recognises the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The seccomp filter is built and installed.
    pub seccomp: bool,
    /// `false`, or the Landlock ABI the second write fence uses.
    pub landlock: serde_json::Value,
    /// How `--pids` (and the other limits) act: `"cgroup"` or `"rlimit"`.
    pub limits: &'static str,
    /// The command's user namespace: `"own"` (as root: identity-mapped, no host
    /// capability) or `"user"` (the caller's uid mapped alone).
    pub userns: &'static str,
}

/// `{sandbox, reflink, root, scratch}`.
#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    pub sandbox: Sandbox,
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
    let (sandbox, stage) = match made
        .clone()
        .map(|_| crate::sandbox::probe(&dir.join("sandbox")))
    {
        Ok(Ok(())) => (Ok(()), None),
        Ok(Err(u)) => (Err(u.to_string()), u.stage),
        Err(why) => (Err(why), None),
    };
    #[cfg(not(target_os = "linux"))]
    let (sandbox, stage) = (
        Err("the sandbox needs Linux namespaces and overlayfs".to_string()),
        None,
    );
    let reflink = made.and_then(|_| reflink(&dir));
    let _ = crate::workspace::remove_any(&dir);
    let check = Check::from(sandbox);
    #[cfg(target_os = "linux")]
    let (seccomp, landlock, limits) = (
        revl_sandbox::seccomp::programs().is_ok(),
        match crate::sandbox::landlock_abi() {
            0 => serde_json::Value::Bool(false),
            n => serde_json::Value::from(n),
        },
        crate::sandbox::limits_mode(),
    );
    #[cfg(not(target_os = "linux"))]
    let (seccomp, landlock, limits) = (false, serde_json::Value::Bool(false), "rlimit");
    let fix = check
        .why
        .as_ref()
        .and_then(|_| refusal_fix(stage, is_root()));
    Doctor {
        sandbox: Sandbox {
            available: check.available,
            why: check.why,
            fix,
            seccomp,
            landlock,
            limits,
            userns: if is_root() { "own" } else { "user" },
        },
        reflink: Check::from(reflink),
        root: is_root(),
        scratch: dir.display().to_string(),
    }
}

pub(crate) fn is_root() -> bool {
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

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The common reasons a distribution refuses the sandbox, recognised from the system's
/// settings and the stage that failed, with the exact fix.
pub fn refusal_fix(stage: Option<Stage>, root: bool) -> Option<String> {
    refusal_fix_with(stage, root, &read_sysctl)
}

/// [`refusal_fix`] over given settings (`read` answers a /proc/sys path).
pub fn refusal_fix_with(
    stage: Option<Stage>,
    root: bool,
    read: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let userns_stage = stage.is_some_and(Stage::needs_user_namespaces);
    if userns_stage && read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some(
            "user namespaces are disabled (user.max_user_namespaces is 0): \
             `sudo sysctl -w user.max_user_namespaces=15000` (persist it in /etc/sysctl.d/99-revl.conf)"
                .to_string(),
        );
    }
    if !root && userns_stage {
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Some(
                "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and later): allow \
                 them for revl with a profile, e.g. /etc/apparmor.d/revl containing \
                 `abi <abi/4.0>, include <tunables/global> profile revl /usr/local/bin/revl \
                 flags=(unconfined) { userns, }` then `sudo apparmor_parser -r /etc/apparmor.d/revl`; \
                 or for the whole machine `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
                    .to_string(),
            );
        }
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Some(
                "unprivileged user namespaces are disabled: `sudo sysctl -w kernel.unprivileged_userns_clone=1` \
                 (persist it in /etc/sysctl.d/99-revl.conf)"
                    .to_string(),
            );
        }
    }
    if stage == Some(Stage::Overlay) {
        return Some(if root {
            "the kernel refused overlayfs: load it with `sudo modprobe overlay`, and keep the \
             store's scratch directory on a filesystem that can hold an overlay upper layer \
             (ext4, xfs, btrfs, tmpfs)"
                .to_string()
        } else {
            "the kernel refused overlayfs in a user namespace (it needs Linux 5.11 or later, and \
             an upper layer filesystem with user extended attributes): upgrade the kernel, put \
             the store on ext4, xfs or btrfs (`--store DIR`), or run revl as root"
                .to_string()
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{refusal_fix_with, Stage};

    fn with<'a>(settings: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |p: &str| {
            settings
                .iter()
                .find(|(k, _)| p.ends_with(k))
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_common_refusals_get_their_exact_fix() {
        let ns = Some(Stage::Namespaces);
        let apparmor = with(&[("apparmor_restrict_unprivileged_userns", "1")]);
        let fix = refusal_fix_with(ns, false, &apparmor).unwrap();
        assert!(
            fix.contains("kernel.apparmor_restrict_unprivileged_userns=0"),
            "{fix}"
        );
        assert!(fix.contains("userns,"), "{fix}");
        let debian = with(&[("unprivileged_userns_clone", "0")]);
        let fix = refusal_fix_with(ns, false, &debian).unwrap();
        assert!(
            fix.contains("sysctl -w kernel.unprivileged_userns_clone=1"),
            "{fix}"
        );
        let none = with(&[("max_user_namespaces", "0")]);
        let fix = refusal_fix_with(ns, true, &none).unwrap();
        assert!(fix.contains("user.max_user_namespaces=15000"), "{fix}");
        let ovl = Some(Stage::Overlay);
        let fix = refusal_fix_with(ovl, false, &with(&[])).unwrap();
        assert!(fix.contains("5.11"), "{fix}");
        // Root is not held back by the unprivileged-only switches.
        assert_eq!(refusal_fix_with(ns, true, &apparmor), None);
        assert_eq!(refusal_fix_with(Some(Stage::Proc), false, &apparmor), None);
        assert_eq!(refusal_fix_with(None, false, &apparmor), None);
        // The command's own user namespace (as root) is a user-namespace stage too.
        let fix = refusal_fix_with(Some(Stage::CommandUserns), true, &none).unwrap();
        assert!(fix.contains("user.max_user_namespaces=15000"), "{fix}");
    }
}
