//! The exec sandbox's seccomp filter (docs/security.md), built with `seccompiler` before the fork
//! and installed by the command's own process as the last step before exec. Every denied
//! call fails with `EPERM` (nothing is killed), except `clone3`, which fails with `ENOSYS`
//! so that the C library falls back to `clone`, whose flags the filter can see.
//!
//! The calls are the tables below ([`DENY`], [`FILTERED`], [`ENOSYS`]), from which
//! [`programs`] builds the filter; docs/security.md ("Seccomp") lists the same calls, and a
//! test (`tests/seccomp_docs.rs`) holds the two equal. On x86-64 the x32 numbering (a second
//! entry point to every call) is refused whole; a call made through another architecture's
//! entry point (32-bit `int 0x80`) kills the process (seccompiler's architecture check).

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Calls that always fail with EPERM, by name.
pub const DENY: &[(&str, libc::c_long)] = &[
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("setns", libc::SYS_setns),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
];

/// Calls refused with EPERM when an argument says so: `clone` and `unshare` with any
/// `CLONE_NEW*` flag, `socket` and `socketpair` of any family but `AF_UNIX`, `AF_INET` and
/// `AF_INET6`, `ioctl` with `TIOCSTI` or `TIOCLINUX`.
pub const FILTERED: &[(&str, libc::c_long)] = &[
    ("clone", libc::SYS_clone),
    ("unshare", libc::SYS_unshare),
    ("socket", libc::SYS_socket),
    ("socketpair", libc::SYS_socketpair),
    ("ioctl", libc::SYS_ioctl),
];

/// Calls that fail with ENOSYS (the C library then falls back to one the filter can see).
pub const ENOSYS: &[(&str, libc::c_long)] = &[("clone3", libc::SYS_clone3)];

/// The namespace flags of `clone` and `unshare` (`CLONE_NEWTIME` shares its bit with the
/// exit signal of `clone`: `unshare` only).
const NEW_NS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];
const CLONE_NEWTIME: u64 = 0x80;

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(c: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(c).map_err(|e| e.to_string())
}

/// The filters to install, in order (the kernel applies the strictest answer of all).
/// `Err` where seccompiler has no support for this architecture.
pub fn programs() -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENY {
        rules.insert(*nr, Vec::new());
    }
    let ns_rules = |flags: &[u64]| -> Result<Vec<SeccompRule>, String> {
        flags
            .iter()
            .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f), *f)?]))
            .collect()
    };
    let family = || -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(vec![
            cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ])?])
    };
    for (name, nr) in FILTERED {
        let r = match *name {
            "clone" => ns_rules(NEW_NS)?,
            "unshare" => {
                let mut unshare = NEW_NS.to_vec();
                unshare.push(CLONE_NEWTIME);
                ns_rules(&unshare)?
            }
            "socket" | "socketpair" => family()?,
            "ioctl" => vec![
                rule(vec![cond(1, SeccompCmpOp::Eq, TIOCSTI)?])?,
                rule(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
            ],
            other => return Err(format!("no argument filter for {other}")),
        };
        rules.insert(*nr, r);
    }
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let clone3 = SeccompFilter::new(
        ENOSYS.iter().map(|(_, nr)| (*nr, Vec::new())).collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let mut out: Vec<BpfProgram> = vec![
        eperm
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
        clone3
            .try_into()
            .map_err(|e: seccompiler::BackendError| e.to_string())?,
    ];
    if arch == TargetArch::x86_64 {
        out.push(no_x32());
    }
    Ok(out)
}

/// x86-64 only: every call numbered with the x32 bit fails with EPERM.
fn no_x32() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    let s = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        // seccomp_data.arch (offset 4)
        s(LD_W_ABS, 0, 0, 4),
        s(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        // seccomp_data.nr (offset 0)
        s(LD_W_ABS, 0, 0, 0),
        s(JGE_K, 0, 1, 0x4000_0000),
        s(RET_K, 0, 0, 0x0005_0000 | libc::EPERM as u32), // SECCOMP_RET_ERRNO
        s(RET_K, 0, 0, 0x7fff_0000),                      // SECCOMP_RET_ALLOW
    ]
}

/// Install `progs` on the calling thread (`no_new_privs` must be set). No allocation: the
/// programs were built before the fork.
#[allow(unsafe_code)]
pub fn install(progs: &[BpfProgram]) -> std::io::Result<()> {
    for p in progs {
        let prog = libc::sock_fprog {
            len: p.len() as libc::c_ushort,
            filter: p.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at the program's instructions, which outlive the call; the
        // kernel copies them.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0 as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
