//! The exec sandbox's seccomp filter (docs/security.md), built with `seccompiler` before the fork
//! and installed by the command's own process as the last step before exec. Every denied
//! call fails with `EPERM` (nothing is killed), except `clone3`, which fails with `ENOSYS`
//! so that the C library falls back to `clone`, whose flags the filter can see.
//!
//! Denied: `io_uring_*`; `ptrace`, `process_vm_readv/writev`, `pidfd_getfd`, `kcmp`;
//! `keyctl`, `add_key`, `request_key`; `bpf`, `userfaultfd`, `perf_event_open`;
//! `kexec_*`, `init_module`, `finit_module`, `delete_module`; the mount family (`mount`,
//! `umount2`, `pivot_root`, `move_mount`, `open_tree`, `fsopen`, `fsconfig`, `fsmount`,
//! `fspick`, `mount_setattr`); `setns`, and `unshare`/`clone` with any `CLONE_NEW*` flag;
//! `socket`/`socketpair` of any family but AF_UNIX, AF_INET and AF_INET6 (no AF_NETLINK,
//! AF_VSOCK, AF_PACKET, …); `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`; and the host-wide
//! administration calls a capability-less process could not make anyway (`swapon`,
//! `swapoff`, `reboot`, `acct`, `quotactl`, `open_by_handle_at`, `iopl`, `ioperm`,
//! `fanotify_init`, `syslog`, `vhangup`), so that they fail the same way under any
//! configuration. On x86-64 the x32 numbering (a second entry point to every call) is
//! refused whole; a call made through another architecture's entry point (32-bit
//! `int 0x80`) kills the process (seccompiler's architecture check).

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Calls that always fail with EPERM.
const DENY: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_setns,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    libc::SYS_fanotify_init,
    libc::SYS_syslog,
    libc::SYS_vhangup,
];

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
    for nr in DENY {
        rules.insert(*nr, Vec::new());
    }
    let ns_rules = |flags: &[u64]| -> Result<Vec<SeccompRule>, String> {
        flags
            .iter()
            .map(|f| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f), *f)?]))
            .collect()
    };
    rules.insert(libc::SYS_clone, ns_rules(NEW_NS)?);
    let mut unshare = NEW_NS.to_vec();
    unshare.push(CLONE_NEWTIME);
    rules.insert(libc::SYS_unshare, ns_rules(&unshare)?);
    let family = || -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(vec![
            cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ])?])
    };
    rules.insert(libc::SYS_socket, family()?);
    rules.insert(libc::SYS_socketpair, family()?);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCSTI)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
        ],
    );
    let eperm = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
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

/// Install `progs` on the calling thread (`no_new_privs` must be set).
///
/// # Safety
/// Between fork and exec: raw system calls only (the programs were built before the fork).
pub unsafe fn install(progs: &[BpfProgram]) -> std::io::Result<()> {
    for p in progs {
        let prog = libc::sock_fprog {
            len: p.len() as libc::c_ushort,
            filter: p.as_ptr() as *mut libc::sock_filter,
        };
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
