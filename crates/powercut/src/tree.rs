//! The in-memory tree: every inode has a *current* state (what processes see)
//! and a *durable* state (what survives a power cut). Nothing here knows about
//! FUSE replies; every operation returns `Result<_, Errno>`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags, TimeOrNow};

/// Largest file the layer accepts (writes/truncates beyond it fail with EFBIG).
pub(crate) const MAX_FILE_SIZE: u64 = 1 << 32;
/// Longest file name (bytes), like most Linux filesystems.
pub(crate) const NAME_MAX: usize = 255;
const BLOCK_SIZE: u32 = 4096;
/// Directory cookies 1 and 2 are "." and ".."; real entries start at 3.
const FIRST_COOKIE: u64 = 3;

/// Attributes that travel with an inode's state (current or durable).
#[derive(Clone, Debug)]
pub(crate) struct Meta {
    pub kind: FileType,
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// Entries of one directory with stable readdir cookies.
#[derive(Clone, Debug, Default)]
pub(crate) struct Entries {
    by_name: BTreeMap<OsString, (u64, u64)>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Entries {
    fn get(&self, name: &OsStr) -> Option<u64> {
        self.by_name.get(name).map(|&(ino, _)| ino)
    }

    fn insert(&mut self, name: &OsStr, ino: u64) {
        self.remove(name);
        let cookie = self.next_cookie.max(FIRST_COOKIE);
        self.next_cookie = cookie + 1;
        self.by_name.insert(name.to_owned(), (ino, cookie));
        self.by_cookie.insert(cookie, name.to_owned());
    }

    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let (ino, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Entries whose cookie is greater than `after`, in cookie order.
    fn after(&self, after: u64) -> impl Iterator<Item = (u64, &OsStr, u64)> + '_ {
        self.by_cookie
            .range(after.saturating_add(1)..)
            .filter_map(move |(&cookie, name)| {
                self.by_name
                    .get(name)
                    .map(|&(ino, _)| (cookie, name.as_os_str(), ino))
            })
    }

    fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_name.values().map(|&(ino, _)| ino)
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Body {
    File(Vec<u8>),
    Dir(Entries),
    Symlink(OsString),
    /// FIFOs, sockets, device nodes: no content.
    Special,
}

/// One state (current or durable) of an inode.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub meta: Meta,
    pub body: Body,
}

impl Node {
    fn size(&self) -> u64 {
        match &self.body {
            Body::File(data) => data.len() as u64,
            Body::Dir(entries) => (entries.len() as u64 + 2) * 32,
            Body::Symlink(target) => target.len() as u64,
            Body::Special => 0,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Inode {
    pub cur: Node,
    pub dur: Node,
    /// Link count of the current tree (recomputed from the graph on power cycle).
    pub nlink: u32,
    /// Parent directory in the current tree (directories only; for "..").
    pub parent: u64,
}

/// The whole filesystem: an inode map that never frees anything.
#[derive(Debug)]
pub(crate) struct Tree {
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn check_name(name: &OsStr) -> Result<(), Errno> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') || bytes.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if bytes.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn kind_from_mode(mode: u32) -> Result<FileType, Errno> {
    Ok(match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => FileType::RegularFile,
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => return Err(Errno::EINVAL),
    })
}

fn resolve_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => now(),
    }
}

/// Who asks, for ownership of new inodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
}

impl Tree {
    pub(crate) fn new() -> Tree {
        let t = now();
        let root = Node {
            meta: Meta {
                kind: FileType::Directory,
                perm: 0o755,
                uid: 0,
                gid: 0,
                rdev: 0,
                atime: t,
                mtime: t,
                ctime: t,
            },
            body: Body::Dir(Entries::default()),
        };
        let mut inodes = HashMap::new();
        inodes.insert(
            INodeNo::ROOT.0,
            Inode {
                cur: root.clone(),
                dur: root,
                nlink: 2,
                parent: INodeNo::ROOT.0,
            },
        );
        Tree {
            inodes,
            next_ino: INodeNo::ROOT.0 + 1,
        }
    }

    fn inode(&self, ino: u64) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn inode_mut(&mut self, ino: u64) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn entries(&self, dir: u64) -> Result<&Entries, Errno> {
        match &self.inode(dir)?.cur.body {
            Body::Dir(e) => Ok(e),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Result<&mut Entries, Errno> {
        match &mut self.inode_mut(dir)?.cur.body {
            Body::Dir(e) => Ok(e),
            _ => Err(Errno::ENOTDIR),
        }
    }

    pub(crate) fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let inode = self.inode(ino)?;
        let m = &inode.cur.meta;
        let size = inode.cur.size();
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: m.atime,
            mtime: m.mtime,
            ctime: m.ctime,
            crtime: m.ctime,
            kind: m.kind,
            perm: (m.perm & 0o7777) as u16,
            nlink: inode.nlink,
            uid: m.uid,
            gid: m.gid,
            rdev: m.rdev,
            blksize: BLOCK_SIZE,
            flags: 0,
        })
    }

    pub(crate) fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let entries = self.entries(parent)?;
        let ino = match name.as_bytes() {
            b"." => parent,
            b".." => self.inode(parent)?.parent,
            _ => entries.get(name).ok_or(Errno::ENOENT)?,
        };
        self.attr(ino)
    }

    fn touch_dir(&mut self, dir: u64) {
        if let Some(inode) = self.inodes.get_mut(&dir) {
            let t = now();
            inode.cur.meta.mtime = t;
            inode.cur.meta.ctime = t;
        }
    }

    /// Create a new inode named `name` in `parent`. The new inode's durable
    /// state is its state at creation (empty); only the directory entry is
    /// volatile until `parent` is fsynced.
    pub(crate) fn make(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        symlink: Option<&OsStr>,
        who: Caller,
    ) -> Result<FileAttr, Errno> {
        check_name(name)?;
        let (pgid, psetgid) = {
            let p = self.inode(parent)?;
            (p.cur.meta.gid, p.cur.meta.perm & libc::S_ISGID != 0)
        };
        if self.entries(parent)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let kind = if symlink.is_some() {
            FileType::Symlink
        } else {
            kind_from_mode(mode)?
        };
        let mut perm = mode & 0o7777;
        let gid = if psetgid { pgid } else { who.gid };
        if psetgid && kind == FileType::Directory {
            perm |= libc::S_ISGID;
        }
        if kind == FileType::Symlink {
            perm = 0o777;
        }
        let body = match (kind, symlink) {
            (_, Some(target)) => Body::Symlink(target.to_owned()),
            (FileType::RegularFile, _) => Body::File(Vec::new()),
            (FileType::Directory, _) => Body::Dir(Entries::default()),
            _ => Body::Special,
        };
        let t = now();
        let node = Node {
            meta: Meta {
                kind,
                perm,
                uid: who.uid,
                gid,
                rdev,
                atime: t,
                mtime: t,
                ctime: t,
            },
            body,
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        let is_dir = kind == FileType::Directory;
        self.inodes.insert(
            ino,
            Inode {
                cur: node.clone(),
                dur: node,
                nlink: if is_dir { 2 } else { 1 },
                parent,
            },
        );
        self.entries_mut(parent)?.insert(name, ino);
        if is_dir {
            self.inode_mut(parent)?.nlink += 1;
        }
        self.touch_dir(parent);
        self.attr(ino)
    }

    pub(crate) fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        check_name(name)?;
        if self.inode(ino)?.cur.meta.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        if self.entries(parent)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        self.entries_mut(parent)?.insert(name, ino);
        let inode = self.inode_mut(ino)?;
        inode.nlink += 1;
        inode.cur.meta.ctime = now();
        self.touch_dir(parent);
        self.attr(ino)
    }

    /// Remove an entry; `dir` selects rmdir (true) or unlink (false) semantics.
    pub(crate) fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.entries(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let inode = self.inode(ino)?;
        match (&inode.cur.body, dir) {
            (Body::Dir(e), true) if !e.is_empty() => return Err(Errno::ENOTEMPTY),
            (Body::Dir(_), true) => {}
            (Body::Dir(_), false) => return Err(Errno::EISDIR),
            (_, true) => return Err(Errno::ENOTDIR),
            (_, false) => {}
        }
        self.entries_mut(parent)?.remove(name);
        let inode = self.inode_mut(ino)?;
        inode.cur.meta.ctime = now();
        if dir {
            inode.nlink = 0;
            let p = self.inode_mut(parent)?;
            p.nlink = p.nlink.saturating_sub(1);
        } else {
            inode.nlink = inode.nlink.saturating_sub(1);
        }
        self.touch_dir(parent);
        Ok(())
    }

    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        check_name(newname)?;
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT)
            || !(flags - RenameFlags::RENAME_NOREPLACE).is_empty()
        {
            return Err(Errno::EINVAL);
        }
        let src = self.entries(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let src_is_dir = self.inode(src)?.cur.meta.kind == FileType::Directory;
        let target = self.entries(newparent)?.get(newname);
        if parent == newparent && name == newname {
            return Ok(());
        }
        if let Some(t) = target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if t == src {
                // Two links to the same inode: POSIX says do nothing.
                return Ok(());
            }
            match (&self.inode(t)?.cur.body, src_is_dir) {
                (Body::Dir(e), true) if !e.is_empty() => return Err(Errno::ENOTEMPTY),
                (Body::Dir(_), true) => {}
                (Body::Dir(_), false) => return Err(Errno::EISDIR),
                (_, true) => return Err(Errno::ENOTDIR),
                (_, false) => {}
            }
        }
        if src_is_dir && parent != newparent {
            // Refuse to move a directory below itself (the kernel checks this
            // too; walk bounded in case the tree is odd after a power cycle).
            let mut cur = newparent;
            for _ in 0..=self.inodes.len() {
                if cur == src {
                    return Err(Errno::EINVAL);
                }
                if cur == INodeNo::ROOT.0 {
                    break;
                }
                cur = self.inode(cur)?.parent;
            }
        }
        let t = now();
        if let Some(tino) = target {
            self.entries_mut(newparent)?.remove(newname);
            let ti = self.inode_mut(tino)?;
            ti.cur.meta.ctime = t;
            if src_is_dir {
                ti.nlink = 0;
                let np = self.inode_mut(newparent)?;
                np.nlink = np.nlink.saturating_sub(1);
            } else {
                ti.nlink = ti.nlink.saturating_sub(1);
            }
        }
        self.entries_mut(parent)?.remove(name);
        self.entries_mut(newparent)?.insert(newname, src);
        if src_is_dir && parent != newparent {
            let p = self.inode_mut(parent)?;
            p.nlink = p.nlink.saturating_sub(1);
            self.inode_mut(newparent)?.nlink += 1;
            self.inode_mut(src)?.parent = newparent;
        }
        self.inode_mut(src)?.cur.meta.ctime = t;
        self.touch_dir(parent);
        self.touch_dir(newparent);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
    ) -> Result<FileAttr, Errno> {
        let inode = self.inode_mut(ino)?;
        let t = now();
        if let Some(size) = size {
            match &mut inode.cur.body {
                Body::File(data) => {
                    if size > MAX_FILE_SIZE {
                        return Err(Errno::EFBIG);
                    }
                    data.resize(size as usize, 0);
                    inode.cur.meta.mtime = t;
                }
                Body::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        let m = &mut inode.cur.meta;
        if let Some(mode) = mode {
            m.perm = mode & 0o7777;
        }
        if let Some(uid) = uid {
            m.uid = uid;
        }
        if let Some(gid) = gid {
            m.gid = gid;
        }
        if let Some(a) = atime {
            m.atime = resolve_time(a);
        }
        if let Some(mt) = mtime {
            m.mtime = resolve_time(mt);
        }
        m.ctime = ctime.unwrap_or(t);
        self.attr(ino)
    }

    pub(crate) fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        match &self.inode(ino)?.cur.body {
            Body::Symlink(target) => Ok(target.as_bytes().to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn check_file(&self, ino: u64) -> Result<(), Errno> {
        match &self.inode(ino)?.cur.body {
            Body::File(_) | Body::Special => Ok(()),
            Body::Dir(_) => Err(Errno::EISDIR),
            Body::Symlink(_) => Err(Errno::ELOOP),
        }
    }

    pub(crate) fn check_dir(&self, ino: u64) -> Result<(), Errno> {
        self.entries(ino).map(|_| ())
    }

    pub(crate) fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        match &self.inode(ino)?.cur.body {
            Body::File(data) => {
                let len = data.len() as u64;
                let start = offset.min(len) as usize;
                let end = offset.saturating_add(u64::from(size)).min(len) as usize;
                Ok(data[start..end].to_vec())
            }
            Body::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn write(&mut self, ino: u64, offset: u64, buf: &[u8]) -> Result<u32, Errno> {
        let inode = self.inode_mut(ino)?;
        let Body::File(data) = &mut inode.cur.body else {
            return Err(Errno::EINVAL);
        };
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let (offset, end) = (offset as usize, end as usize);
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset..end].copy_from_slice(buf);
        let t = now();
        inode.cur.meta.mtime = t;
        inode.cur.meta.ctime = t;
        u32::try_from(buf.len()).map_err(|_| Errno::EINVAL)
    }

    /// `fallocate`: mode 0 extends the file with zeros, KEEP_SIZE is a no-op.
    pub(crate) fn fallocate(
        &mut self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), Errno> {
        let inode = self.inode_mut(ino)?;
        let Body::File(data) = &mut inode.cur.body else {
            return Err(Errno::ENODEV);
        };
        let end = offset
            .checked_add(length)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        match mode {
            0 => {
                if (data.len() as u64) < end {
                    data.resize(end as usize, 0);
                    let t = now();
                    inode.cur.meta.mtime = t;
                    inode.cur.meta.ctime = t;
                }
                Ok(())
            }
            libc::FALLOC_FL_KEEP_SIZE => Ok(()),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    /// Directory listing after cookie `offset`: (ino, next offset, kind, name).
    pub(crate) fn readdir(
        &self,
        ino: u64,
        offset: u64,
    ) -> Result<Vec<(u64, u64, FileType, OsString)>, Errno> {
        let entries = self.entries(ino)?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push((ino, 1, FileType::Directory, OsString::from(".")));
        }
        if offset < 2 {
            let parent = self.inode(ino)?.parent;
            out.push((parent, 2, FileType::Directory, OsString::from("..")));
        }
        for (cookie, name, child) in entries.after(offset) {
            if let Some(c) = self.inodes.get(&child) {
                out.push((child, cookie, c.cur.meta.kind, name.to_owned()));
            }
        }
        Ok(out)
    }

    /// `fsync`/`fsyncdir`: the inode's current state becomes durable. For a
    /// directory that is its entry list (and attributes).
    pub(crate) fn sync_inode(&mut self, ino: u64) -> Result<(), Errno> {
        let inode = self.inode_mut(ino)?;
        inode.dur = inode.cur.clone();
        Ok(())
    }

    pub(crate) fn sync_all(&mut self) {
        for inode in self.inodes.values_mut() {
            inode.dur = inode.cur.clone();
        }
    }

    /// Power cut: current := durable everywhere, then link counts and
    /// parents are recomputed from the durable directory graph.
    pub(crate) fn power_cycle(&mut self) {
        for inode in self.inodes.values_mut() {
            inode.cur = inode.dur.clone();
            inode.nlink = 0;
        }
        let root = INodeNo::ROOT.0;
        let mut counts: HashMap<u64, u32> = HashMap::new();
        let mut parents: HashMap<u64, u64> = HashMap::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut queue = VecDeque::from([root]);
        seen.insert(root);
        parents.insert(root, root);
        *counts.entry(root).or_default() += 1; // root's ".." (itself)
        while let Some(dir) = queue.pop_front() {
            let Some(Inode {
                cur:
                    Node {
                        body: Body::Dir(entries),
                        ..
                    },
                ..
            }) = self.inodes.get(&dir)
            else {
                continue;
            };
            *counts.entry(dir).or_default() += 1; // "."
            for child in entries.inos() {
                *counts.entry(child).or_default() += 1;
                let child_is_dir = matches!(
                    self.inodes.get(&child).map(|i| &i.cur.body),
                    Some(Body::Dir(_))
                );
                if child_is_dir {
                    *counts.entry(dir).or_default() += 1; // child's ".."
                    parents.entry(child).or_insert(dir);
                    if seen.insert(child) {
                        queue.push_back(child);
                    }
                }
            }
        }
        for (ino, inode) in &mut self.inodes {
            inode.nlink = counts.get(ino).copied().unwrap_or(0);
            if let Some(&p) = parents.get(ino) {
                inode.parent = p;
            }
        }
    }

    pub(crate) fn inode_count(&self) -> u64 {
        self.inodes.len() as u64
    }
}
