//! A small tmpfs under a test's directory: a store on a real filesystem that is read-only
//! or full to the last byte, where a synthetic error would only imitate one. Mounting
//! needs root, which CI has; as root a mount that fails fails the test (never a silent
//! skip). Not as root, [`Tmpfs::mount`] answers `None` and the caller says which case it
//! ran instead.

use super::common::Dir;
use std::io::Write;
use std::process::Command;

pub struct Tmpfs {
    pub dir: Dir,
}

impl Tmpfs {
    /// A tmpfs of `bytes` mounted on a fresh directory named for `test`; `None` when this
    /// process is not root.
    pub fn mount(test: &str, bytes: u64) -> Option<Tmpfs> {
        if !is_root() {
            return None;
        }
        let dir = Dir::new(test);
        mount(
            &["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"],
            &dir,
        );
        Some(Tmpfs { dir })
    }

    /// Remounts it read-only: every write fails with EROFS, whoever asks.
    pub fn read_only(&self) {
        mount(&["-o", "remount,ro"], &self.dir);
    }

    /// Fills it with one file until the filesystem answers ENOSPC.
    pub fn fill(&self) {
        let mut file = std::fs::File::create(self.dir.0.join("filler")).expect("create filler");
        let chunk = vec![0u8; 4096];
        let err = loop {
            if let Err(e) = file.write_all(&chunk).and_then(|()| file.sync_all()) {
                break e;
            }
        };
        assert_eq!(
            err.raw_os_error(),
            Some(28),
            "filling the tmpfs ended with {err}, not ENOSPC"
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Before `Dir` removes the directory; lazy, so a file still open cannot keep it.
        let _ = Command::new("umount").arg("-l").arg(&self.dir.0).status();
    }
}

fn mount(args: &[&str], dir: &Dir) {
    let out = Command::new("mount")
        .args(args)
        .arg(&dir.0)
        .output()
        .expect("run mount (util-linux)");
    assert!(
        out.status.success(),
        "mount {args:?} {} failed as root: {} (the read-only and full-store cases need a \
         tmpfs; run as another user to use a 0o555 directory and a synthetic ENOSPC instead)",
        dir.0.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
