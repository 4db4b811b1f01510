//! Resource limits of the command's process (docs/security.md, "Limits"), and who revl runs
//! as.

pub use rustix::process::Resource;
use rustix::process::Rlimit;

/// Set each `(resource, limit)` (`None`: left as inherited). The CPU limit's hard limit is
/// a second past its soft one: `SIGXCPU` at the limit (the result names it), `SIGKILL` a
/// second later for a command that ignores it.
pub fn apply(limits: &[(Resource, Option<u64>)]) -> std::io::Result<()> {
    for (res, lim) in limits {
        let Some(lim) = *lim else { continue };
        let max = if *res == Resource::Cpu {
            lim.saturating_add(1)
        } else {
            lim
        };
        rustix::process::setrlimit(
            *res,
            Rlimit {
                current: Some(lim),
                maximum: Some(max),
            },
        )?;
    }
    Ok(())
}

/// The hard limit of `res` for this process (`None`: unlimited).
pub fn hard(res: Resource) -> Option<u64> {
    rustix::process::getrlimit(res).maximum
}

/// Is revl running as root (then no user namespace is needed, and none is made)?
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The effective uid and gid.
pub fn ids() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

/// This process's pid.
pub fn pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}
