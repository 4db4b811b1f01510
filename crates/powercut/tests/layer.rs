//! Tests of the power-cut layer through a real FUSE mount. They need
//! `/dev/fuse` and root, so plain `cargo test` leaves them out (ignored) and
//! `scripts/test` runs them (as root, with `--include-ignored`); without
//! `/dev/fuse` or root they fail with the mount error, which says so.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use revl_powercut::{Disk, Mounted};

/// A disk mounted under a fresh tempdir. Field order matters: the mount is
/// dropped (unmounted) before the tempdir is removed.
struct Fixture {
    mnt: Option<Mounted>,
    disk: Disk,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("mnt");
        fs::create_dir(&dir).expect("create mountpoint");
        let disk = Disk::new();
        let mnt = disk.mount(&dir).unwrap_or_else(|e| {
            panic!("power-cut layer could not mount (needs /dev/fuse and root: run scripts/test as root): {e}")
        });
        Fixture {
            mnt: Some(mnt),
            disk,
            _tmp: tmp,
        }
    }

    fn root(&self) -> PathBuf {
        self.mnt.as_ref().expect("mounted").path().to_path_buf()
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// Power cut now (whatever is durable survives), then remount.
    fn crash(&mut self) {
        let mnt = self.mnt.take().expect("mounted");
        self.mnt = Some(mnt.cut_and_remount().expect("cut and remount"));
    }
}

fn fsync_dir(p: &Path) {
    File::open(p)
        .and_then(|d| d.sync_all())
        .unwrap_or_else(|e| panic!("fsync dir {}: {e}", p.display()));
}

fn write_file(p: &Path, data: &[u8]) {
    let mut f = File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
    f.write_all(data).expect("write");
}

fn read(p: &Path) -> Option<Vec<u8>> {
    match fs::read(p) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("read {}: {e}", p.display()),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn is_mountpoint(p: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let p = p.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == p))
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_unsynced_write_is_lost_synced_write_survives() {
    let mut fx = Fixture::new();
    let f = fx.p("data.bin");
    let base = pattern(5000, 1);
    write_file(&f, &base);
    fx.disk.sync_all();

    // Overwrite part and grow, no fsync: lost.
    let file = OpenOptions::new().write(true).open(&f).expect("open");
    file.write_all_at(&pattern(8000, 2), 3000).expect("write");
    drop(file);
    assert_eq!(fs::metadata(&f).expect("stat").len(), 11000);
    fx.crash();
    assert_eq!(read(&fx.p("data.bin")).as_deref(), Some(&base[..]));

    // Same with fsync: survives byte for byte.
    let f = fx.p("data.bin");
    let file = OpenOptions::new().write(true).open(&f).expect("open");
    file.write_all_at(&pattern(8000, 2), 3000).expect("write");
    file.sync_all().expect("fsync");
    drop(file);
    let mut expected = base[..3000].to_vec();
    expected.extend_from_slice(&pattern(8000, 2));
    // A later unsynced write does not leak in.
    let file = OpenOptions::new().write(true).open(&f).expect("open");
    file.write_all_at(b"XXXX", 0).expect("write");
    drop(file);
    fx.crash();
    assert_eq!(read(&fx.p("data.bin")), Some(expected));
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_new_file_needs_directory_fsync() {
    let mut fx = Fixture::new();
    fs::create_dir(fx.p("d")).expect("mkdir");
    fx.disk.sync_all();

    // File fsynced, directory not: the name is lost.
    let mut f = File::create(fx.p("d/a")).expect("create");
    f.write_all(b"contents").expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    fx.crash();
    assert_eq!(names(&fx.p("d")), Vec::<String>::new());

    // File and directory fsynced: present with its data.
    let mut f = File::create(fx.p("d/a")).expect("create");
    f.write_all(b"contents").expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    fsync_dir(&fx.p("d"));
    fx.crash();
    assert_eq!(read(&fx.p("d/a")).as_deref(), Some(&b"contents"[..]));

    // Directory fsynced but not the file: the name survives, the data not.
    write_file(&fx.p("d/b"), b"lost data");
    fsync_dir(&fx.p("d"));
    fx.crash();
    assert_eq!(read(&fx.p("d/b")).as_deref(), Some(&b""[..]));

    // A new directory needs its parent fsynced too.
    fs::create_dir(fx.p("d/sub")).expect("mkdir");
    write_file(&fx.p("d/sub/x"), b"x");
    fsync_dir(&fx.p("d/sub"));
    fx.crash();
    assert!(!fx.p("d/sub").exists());
    assert_eq!(names(&fx.p("d")), vec!["a", "b"]);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_rename_needs_directory_fsync() {
    let mut fx = Fixture::new();
    write_file(&fx.p("old"), b"payload");
    fx.disk.sync_all();

    fs::rename(fx.p("old"), fx.p("new")).expect("rename");
    assert_eq!(names(&fx.root()), vec!["new"]);
    fx.crash();
    assert_eq!(names(&fx.root()), vec!["old"]);
    assert_eq!(read(&fx.p("old")).as_deref(), Some(&b"payload"[..]));

    fs::rename(fx.p("old"), fx.p("new")).expect("rename");
    fsync_dir(&fx.root());
    fx.crash();
    assert_eq!(names(&fx.root()), vec!["new"]);
    assert_eq!(read(&fx.p("new")).as_deref(), Some(&b"payload"[..]));

    // Rename over an existing file, then the classic write-tmp + rename.
    write_file(&fx.p("tmp"), b"v2");
    File::open(fx.p("tmp"))
        .and_then(|f| f.sync_all())
        .expect("fsync");
    fs::rename(fx.p("tmp"), fx.p("new")).expect("rename over");
    fx.crash();
    assert_eq!(names(&fx.root()), vec!["new"]);
    assert_eq!(read(&fx.p("new")).as_deref(), Some(&b"payload"[..]));

    // Across directories, each directory is durable on its own: fsync only
    // the destination and the file is in both after the cut.
    fs::create_dir(fx.p("a")).expect("mkdir");
    fs::create_dir(fx.p("b")).expect("mkdir");
    write_file(&fx.p("a/f"), b"f");
    fx.disk.sync_all();
    fs::rename(fx.p("a/f"), fx.p("b/f")).expect("rename");
    fsync_dir(&fx.p("b"));
    fx.crash();
    assert_eq!(names(&fx.p("a")), vec!["f"]);
    assert_eq!(names(&fx.p("b")), vec!["f"]);
    let (ia, ib) = (
        fs::metadata(fx.p("a/f")).expect("stat"),
        fs::metadata(fx.p("b/f")).expect("stat"),
    );
    assert_eq!(ia.ino(), ib.ino());
    assert_eq!(ia.nlink(), 2);
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_truncate_and_chmod_are_volatile_until_fsync() {
    let mut fx = Fixture::new();
    let body = pattern(1000, 3);
    write_file(&fx.p("f"), &body);
    fs::set_permissions(fx.p("f"), fs::Permissions::from_mode(0o644)).expect("chmod");
    fx.disk.sync_all();

    let f = OpenOptions::new()
        .write(true)
        .open(fx.p("f"))
        .expect("open");
    f.set_len(10).expect("truncate");
    drop(f);
    fs::set_permissions(fx.p("f"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let m = fs::metadata(fx.p("f")).expect("stat");
    assert_eq!((m.len(), m.mode() & 0o7777), (10, 0o600));
    fx.crash();
    let m = fs::metadata(fx.p("f")).expect("stat");
    assert_eq!((m.len(), m.mode() & 0o7777), (1000, 0o644));
    assert_eq!(read(&fx.p("f")), Some(body.clone()));

    let f = OpenOptions::new()
        .write(true)
        .open(fx.p("f"))
        .expect("open");
    f.set_len(10).expect("truncate");
    fs::set_permissions(fx.p("f"), fs::Permissions::from_mode(0o600)).expect("chmod");
    f.sync_all().expect("fsync");
    drop(f);
    fx.crash();
    let m = fs::metadata(fx.p("f")).expect("stat");
    assert_eq!((m.len(), m.mode() & 0o7777), (10, 0o600));
    assert_eq!(read(&fx.p("f")), Some(body[..10].to_vec()));

    // Growing truncate fills with zeros (and is volatile too).
    let f = OpenOptions::new()
        .write(true)
        .open(fx.p("f"))
        .expect("open");
    f.set_len(20).expect("extend");
    drop(f);
    let mut grown = body[..10].to_vec();
    grown.resize(20, 0);
    assert_eq!(read(&fx.p("f")), Some(grown));
    fx.crash();
    assert_eq!(fs::metadata(fx.p("f")).expect("stat").len(), 10);
}

// ---- cut points with a child process -------------------------------------

const CHILD_ENV: &str = "REVL_POWERCUT_CHILD_DIR";
const STEPS: usize = 13;

/// The workload of `power_cut_layer_cut_point_*`, in a child process started
/// with `CHILD_ENV` (on the mount that variable names). Run as a test of its
/// own, without `CHILD_ENV`, it runs on a fresh mount and must end in the
/// model's final state, live and after a cut (never a no-op that passes).
#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_child_workload() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        workload(Path::new(&dir));
        return;
    }
    let mut fx = Fixture::new();
    workload(&fx.root());
    assert_eq!(
        flat_snapshot(&fx.root()),
        BTreeMap::from([
            ("a".to_string(), b"hello world!!!".to_vec()),
            ("c".to_string(), b"bee".to_vec()),
        ]),
        "the whole workload, live"
    );
    fx.crash();
    assert_eq!(flat_snapshot(&fx.root()), model_after(STEPS));
}

/// Each step is exactly one mutating FUSE request; "STEP k" is printed after
/// step k returned.
fn workload(dir: &Path) {
    let step = |k: usize| {
        println!("STEP {k}");
        std::io::stdout().flush().expect("flush");
    };
    let open_new = |name: &str| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(dir.join(name))
            .expect("create")
    };
    let fa = open_new("a");
    step(1);
    fa.write_all_at(b"hello", 0).expect("write");
    step(2);
    fa.sync_all().expect("fsync");
    step(3);
    fsync_dir(dir);
    step(4);
    fa.write_all_at(b" world", 5).expect("write");
    step(5);
    let fb = open_new("b");
    step(6);
    fb.write_all_at(b"bee", 0).expect("write");
    step(7);
    fb.sync_all().expect("fsync");
    step(8);
    fa.sync_all().expect("fsync");
    step(9);
    fsync_dir(dir);
    step(10);
    fs::rename(dir.join("b"), dir.join("c")).expect("rename");
    step(11);
    fsync_dir(dir);
    step(12);
    fa.write_all_at(b"!!!", 11).expect("write");
    step(13);
}

/// What must be on disk after a cut right after mutating step `n`.
fn model_after(n: usize) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: &[u8]| {
        m.insert(k.to_string(), v.to_vec());
    };
    match n {
        0..=3 => {}
        4..=8 => put("a", b"hello"),
        9 => put("a", b"hello world"),
        10 | 11 => {
            put("a", b"hello world");
            put("b", b"bee");
        }
        _ => {
            put("a", b"hello world");
            put("c", b"bee");
        }
    }
    m
}

fn flat_snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    names(dir)
        .into_iter()
        .map(|n| {
            let data = read(&dir.join(&n)).expect("listed file readable");
            (n, data)
        })
        .collect()
}

fn spawn_workload(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            "power_cut_layer_child_workload",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child workload")
}

fn steps_printed(child: &mut std::process::Child) -> Vec<usize> {
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read child stdout");
    // libtest prints "test NAME ... " without a newline before the first step.
    out.lines()
        .filter_map(|l| l.find("STEP ").map(|i| &l[i + 5..]))
        .map(|k| k.trim().parse().expect("step number"))
        .collect()
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_cut_point_blocks_at_exactly_the_nth_op() {
    for n in 1..=STEPS {
        let mut fx = Fixture::new();
        let root = fx.root();
        let before = fx.disk.ops();
        fx.disk.arm_cut_after(n as u64);
        let mut child = spawn_workload(&root);
        assert!(
            fx.disk.wait_cut(Duration::from_secs(30)),
            "cut {n}: no cut within 30 s (child: {:?})",
            child.try_wait()
        );
        assert_eq!(fx.disk.ops(), before + n as u64, "cut {n}: op count");
        // The child is stuck inside its n-th request.
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "cut {n}: child exited although its request is blocked"
        );
        assert_eq!(fx.disk.ops(), before + n as u64, "cut {n}: ops after cut");
        child.kill().expect("SIGKILL");
        fx.disk.release();
        let status = child.wait().expect("wait");
        assert!(!status.success(), "cut {n}: child was not killed");
        let steps = steps_printed(&mut child);
        assert_eq!(
            steps,
            (1..n).collect::<Vec<_>>(),
            "cut {n}: steps acknowledged"
        );
        fx.crash();
        assert_eq!(
            flat_snapshot(&fx.root()),
            model_after(n),
            "cut {n}: durable state after the cut"
        );
    }

    // Never reached: the workload completes, and a later cut keeps step 12.
    let mut fx = Fixture::new();
    fx.disk.arm_cut_after(STEPS as u64 + 1);
    let mut child = spawn_workload(&fx.root());
    let status = child.wait().expect("wait");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "workload failed: {err}");
    assert_eq!(steps_printed(&mut child), (1..=STEPS).collect::<Vec<_>>());
    assert!(!fx.disk.cut_happened());
    fx.disk.disarm();
    let live = flat_snapshot(&fx.root());
    assert_eq!(
        live.get("a").map(Vec::as_slice),
        Some(&b"hello world!!!"[..])
    );
    fx.crash();
    assert_eq!(flat_snapshot(&fx.root()), model_after(STEPS));
}

// ---- unmount while blocked ------------------------------------------------

/// Run `f` on a thread; fail if it takes longer than `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_unmount_with_blocked_request_does_not_hang() {
    let mut fx = Fixture::new();
    write_file(&fx.p("f"), b"durable");
    fx.disk.sync_all();
    let path = fx.p("f");
    let root = fx.root();

    // A thread of this process blocks in a write.
    fx.disk.arm_cut_after(1);
    let writer = std::thread::spawn(move || {
        let f = OpenOptions::new().write(true).open(&path)?;
        f.write_all_at(b"volatile", 0)
    });
    assert!(fx.disk.wait_cut(Duration::from_secs(10)), "no cut");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!writer.is_finished(), "the write should be blocked");

    // Unmount without release: the blocked request fails, nothing hangs.
    let mnt = fx.mnt.take().expect("mounted");
    let t0 = Instant::now();
    within(Duration::from_secs(20), "unmount", move || mnt.unmount()).expect("unmount");
    eprintln!("unmount with a blocked request took {:?}", t0.elapsed());
    let res = within(Duration::from_secs(10), "blocked writer", move || {
        writer.join()
    })
    .expect("writer thread");
    let err = res.expect_err("the blocked write must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(!is_mountpoint(&root), "still mounted");

    fx.disk.power_cycle().expect("power cycle");
    fx.mnt = Some(fx.disk.mount(&root).expect("remount"));
    assert_eq!(read(&fx.p("f")).as_deref(), Some(&b"durable"[..]));
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_unmount_with_killed_child_holding_files_does_not_hang() {
    let mut fx = Fixture::new();
    let root = fx.root();
    fx.disk.arm_cut_after(2);
    // A shell keeps a file open and is blocked in its second request.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec 3>f; echo one >&3; echo two >&3; sleep 60")
        .current_dir(&root)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sh");
    assert!(fx.disk.wait_cut(Duration::from_secs(10)), "no cut");
    child.kill().expect("SIGKILL");
    fx.disk.release();
    // Unmount before reaping the child: the detach must not wait for it.
    let mnt = fx.mnt.take().expect("mounted");
    let remounted = within(Duration::from_secs(20), "cut_and_remount", move || {
        mnt.cut_and_remount()
    })
    .expect("cut and remount");
    fx.mnt = Some(remounted);
    child.wait().expect("wait");
    // Created (op 1) but the directory was never fsynced.
    assert_eq!(names(&fx.root()), Vec::<String>::new());
}

// ---- round trip ------------------------------------------------------------

#[derive(Debug, PartialEq, Eq)]
enum Obj {
    File(Vec<u8>, u32),
    Dir(u32),
    Link(PathBuf),
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Obj>) {
    for name in names(&root.join(rel)) {
        let r = rel.join(&name);
        let p = root.join(&r);
        let m = fs::symlink_metadata(&p).expect("lstat");
        let obj = if m.file_type().is_symlink() {
            Obj::Link(fs::read_link(&p).expect("readlink"))
        } else if m.is_dir() {
            walk(root, &r, out);
            Obj::Dir(m.mode() & 0o7777)
        } else {
            Obj::File(fs::read(&p).expect("read"), m.mode() & 0o7777)
        };
        out.insert(r, obj);
    }
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_tree_round_trips_after_sync_all() {
    let mut fx = Fixture::new();
    let root = fx.root();
    let mut count = 0;
    for d in 0..10 {
        let dir = root.join(format!("d{d}"));
        fs::create_dir(&dir).expect("mkdir");
        fs::create_dir(dir.join("nested")).expect("mkdir");
        for i in 0..30 {
            let p = if i % 3 == 0 {
                dir.join("nested").join(format!("n{i}"))
            } else {
                dir.join(format!("f{i}.txt"))
            };
            write_file(&p, &pattern((d * 31 + i * 97) % 3000, (d * 100 + i) as u32));
            if i % 7 == 0 {
                fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).expect("chmod");
            }
            count += 1;
        }
        std::os::unix::fs::symlink(format!("../d{d}/f1.txt"), dir.join("link")).expect("symlink");
    }
    fs::hard_link(root.join("d0/f1.txt"), root.join("hard")).expect("link");
    fs::remove_file(root.join("d9/f2.txt")).expect("unlink");
    fs::rename(root.join("d8/f4.txt"), root.join("d7/moved")).expect("rename");
    assert!(count >= 300);

    let mut before = BTreeMap::new();
    walk(&root, Path::new(""), &mut before);
    let ino_before = fs::metadata(root.join("d3/f5.txt")).expect("stat").ino();
    fx.disk.sync_all();
    // Volatile noise after the sync must vanish.
    write_file(&root.join("noise"), b"noise");
    fs::remove_dir_all(root.join("d5")).expect("rm -r");
    fx.crash();

    let mut after = BTreeMap::new();
    walk(&fx.root(), Path::new(""), &mut after);
    assert_eq!(before.len(), after.len());
    assert!(before == after, "tree differs after sync_all + power cycle");
    let hard = fs::metadata(fx.p("hard")).expect("stat");
    assert_eq!(hard.nlink(), 2);
    assert_eq!(
        hard.ino(),
        fs::metadata(fx.p("d0/f1.txt")).expect("stat").ino()
    );
    assert_eq!(
        fs::metadata(fx.p("d3/f5.txt")).expect("stat").ino(),
        ino_before
    );
    assert_eq!(fs::metadata(fx.p("d3")).expect("stat").nlink(), 3);
    assert_eq!(
        fs::read(fx.p("d4/link")).expect("read through symlink"),
        fs::read(fx.p("d4/f1.txt")).expect("read")
    );
}

// ---- ordinary programs work ------------------------------------------------

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_shell_tools_work() {
    let fx = Fixture::new();
    let script = r#"
set -eu
mkdir -p a/b/c
printf 'hello\n' > a/b/c/f
cp a/b/c/f a/g
cat a/g | grep -q hello
mv a/g a/h
ln a/h a/hard
ln -s b/c/f a/sym
test "$(cat a/sym)" = hello
test "$(readlink a/sym)" = b/c/f
chmod 600 a/h
test "$(stat -c %a a/h)" = 600
test "$(stat -c %h a/h)" = 2
touch -d '2001-02-03 04:05:06' a/h
test "$(stat -c %Y a/h)" = "$(date -d '2001-02-03 04:05:06' +%s)"
truncate -s 10000 a/big
dd if=/dev/zero of=a/dd bs=4096 count=8 conv=fsync status=none
test "$(stat -c %s a/dd)" = 32768
printf 'x' >> a/b/c/f
test "$(wc -c < a/b/c/f)" = 7
flock a/h true
find a | sort > listing
grep -q '^a/b/c/f$' listing
mkfifo a/fifo
test -p a/fifo
df . > /dev/null
if mv -T a/b a/b/c/inside 2>/dev/null; then echo 'moved dir into itself'; exit 1; fi
if rmdir a/b 2>/dev/null; then echo 'rmdir of non-empty dir'; exit 1; fi
rm -r a/b
test ! -e a/b
rm a/h
test "$(stat -c %h a/hard)" = 1
echo ok
"#;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(fx.root())
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    assert!(
        out.status.success() && out.stdout.ends_with(b"ok\n"),
        "script failed: status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
    let (a, b) = (c(from), c(to));
    // SAFETY: valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
#[ignore = "needs root and /dev/fuse: run by scripts/test (README)"]
fn power_cut_layer_rename_flags() {
    let fx = Fixture::new();
    write_file(&fx.p("x"), b"x");
    write_file(&fx.p("y"), b"y");
    let err = renameat2(&fx.p("x"), &fx.p("y"), libc::RENAME_NOREPLACE).expect_err("noreplace");
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    renameat2(&fx.p("x"), &fx.p("z"), libc::RENAME_NOREPLACE).expect("noreplace to a new name");
    assert_eq!(names(&fx.root()), vec!["y", "z"]);
    let err = renameat2(&fx.p("y"), &fx.p("z"), libc::RENAME_EXCHANGE).expect_err("exchange");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(read(&fx.p("z")).as_deref(), Some(&b"x"[..]));
}
