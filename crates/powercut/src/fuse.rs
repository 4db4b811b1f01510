//! The FUSE request handlers: every handler passes the cut gate, runs one
//! operation on the [`Tree`](crate::tree::Tree), counts it if it mutates,
//! then replies.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::tree::{Caller, Tree, MAX_FILE_SIZE, NAME_MAX};
use crate::{Shared, State};

/// Attribute/entry cache time. Everything goes through this one mount, so
/// the kernel's caches stay coherent; a remount starts with fresh caches.
const TTL: Duration = Duration::from_secs(1);
const GEN: Generation = Generation(0);

pub(crate) struct PowerFs {
    pub(crate) shared: Arc<Shared>,
    /// Mount generation this session serves; requests of an older session
    /// (a detached mount still held open) get EIO.
    pub(crate) gen: u64,
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl PowerFs {
    /// Wait while the disk is cut; fail once released or unmounted.
    fn gate<'a>(&'a self, mut st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>, Errno> {
        loop {
            if st.gen != self.gen || st.released {
                return Err(Errno::EIO);
            }
            if !st.cut {
                return Ok(st);
            }
            st = self
                .shared
                .cv
                .wait(st)
                .unwrap_or_else(|poison| poison.into_inner());
        }
    }

    /// Run `f` on the tree. A mutating request is counted after it was
    /// applied; if it is the armed one, the cut happens right there and this
    /// request blocks too (its reply is never sent before `release`).
    fn run<T>(
        &self,
        mutating: bool,
        f: impl FnOnce(&mut Tree) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let mut st = self.gate(self.shared.lock())?;
        let res = f(&mut st.tree);
        if mutating {
            st.ops += 1;
            if st.arm.is_some_and(|at| st.ops >= at) {
                st.arm = None;
                st.cut = true;
                self.shared.cv.notify_all();
            }
            drop(self.gate(st)?);
        }
        res
    }
}

impl Filesystem for PowerFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        // Deliberately no capabilities added: no writeback cache (every write
        // reaches us), no atomic O_TRUNC (truncation arrives as setattr).
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.run(false, |t| t.lookup(parent.0, name)) {
            Ok(attr) => reply.entry(&TTL, &attr, GEN),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {}

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.run(false, |t| t.attr(ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.run(true, |t| {
            t.setattr(ino.0, mode, uid, gid, size, atime, mtime, ctime)
        }) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.run(false, |t| t.readlink(ino.0)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let who = caller(req);
        match self.run(true, |t| {
            t.make(parent.0, name, mode & !umask, rdev, None, who)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, GEN),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let who = caller(req);
        let mode = libc::S_IFDIR | (mode & !umask & 0o7777);
        match self.run(true, |t| t.make(parent.0, name, mode, 0, None, who)) {
            Ok(attr) => reply.entry(&TTL, &attr, GEN),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.run(true, |t| t.remove(parent.0, name, false)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.run(true, |t| t.remove(parent.0, name, true)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let who = caller(req);
        let target = target.as_os_str();
        match self.run(true, |t| {
            t.make(parent.0, link_name, libc::S_IFLNK, 0, Some(target), who)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, GEN),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.run(true, |t| {
            t.rename(parent.0, name, newparent.0, newname, flags)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.run(true, |t| t.link(ino.0, newparent.0, newname)) {
            Ok(attr) => reply.entry(&TTL, &attr, GEN),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.run(false, |t| t.check_file(ino.0)) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.run(false, |t| t.read(ino.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.run(true, |t| t.write(ino.0, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        match self.run(false, |_| Ok(())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match self.run(false, |_| Ok(())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.run(true, |t| t.sync_inode(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.run(false, |t| t.check_dir(ino.0)) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.run(false, |t| t.readdir(ino.0, offset)) {
            Ok(entries) => {
                for (child, next, kind, name) in entries {
                    if reply.add(INodeNo(child), next, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        match self.run(false, |_| Ok(())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.run(true, |t| {
            t.check_dir(ino.0).and_then(|()| t.sync_inode(ino.0))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.run(false, |t| Ok(t.inode_count())) {
            Ok(files) => {
                let blocks = MAX_FILE_SIZE / 4096 * 4;
                let free_files = 1u64 << 20;
                reply.statfs(
                    blocks,
                    blocks / 2,
                    blocks / 2,
                    files + free_files,
                    free_files,
                    4096,
                    NAME_MAX as u32,
                    4096,
                );
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        // ENOSYS: the kernel then answers EOPNOTSUPP itself from now on.
        match self.run(false, |_| Err::<(), _>(Errno::ENOSYS)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        match self.run(false, |_| Err::<(), _>(Errno::ENOSYS)) {
            Ok(()) => reply.size(0),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        match self.run(false, |_| Err::<(), _>(Errno::ENOSYS)) {
            Ok(()) => reply.size(0),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        match self.run(false, |_| Err::<(), _>(Errno::ENOSYS)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With `default_permissions` the kernel checks modes itself.
        match self.run(false, |t| t.attr(ino.0).map(|_| ())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let who = caller(req);
        let mode = if mode & libc::S_IFMT == 0 {
            mode | libc::S_IFREG
        } else {
            mode
        };
        match self.run(true, |t| {
            t.make(parent.0, name, mode & !umask, 0, None, who)
        }) {
            Ok(attr) => reply.created(&TTL, &attr, GEN, FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.run(true, |t| t.fallocate(ino.0, offset, length, mode)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // ENOSYS: the kernel falls back to plain reads and writes.
        match self.run(false, |_| Err::<u32, _>(Errno::ENOSYS)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }
}
