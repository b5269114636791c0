//! Output files that appear whole or not at all.
//!
//! A [`Staged`] file is written under a temporary name in the folder of its final path
//! (`.NAME.PID.partial`) and renamed over the final path by [`Staged::commit`]; dropped without
//! a commit (an error midway, a panic), it removes the temporary file, so a command that fails
//! leaves no partial output, and an existing file at the final path is kept unchanged until the
//! new one is complete. The rename stays within one folder (one file system), so it is atomic.
//!
//! A final path that exists and is not a regular file (a named pipe, `/dev/null`, a terminal)
//! is written directly: it cannot be replaced by a rename, and a reader may be waiting on it.
//!
//! Every file writer of the crate goes through it: CSV tables ([`super::csv::create_writer`]),
//! FITS images ([`super::fits::write_image`]) and PNG figures.
//!
//! Output folders are staged the same way, as a whole ([`super::staged_dir`]).
//!
//! A process ended by a signal runs no destructor: the temporary files of its open outputs are
//! listed process-wide, and [`remove_open_staging_files`] deletes them (the command-line tool
//! calls it on SIGINT and SIGTERM, from a normal thread). One killed outright (SIGKILL, a crash)
//! still leaves its temporary files; the next [`Staged`] output of the same name in that folder
//! removes them: on Linux, a `.NAME.PID.partial` whose PID is not a live process (no
//! `/proc/PID`) and not written for ten minutes is deleted.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use bridge_core::{BridgeError, Result};

/// A file being written under a temporary name, renamed into place by [`Staged::commit`]
/// (see the [module docs](self)).
#[derive(Debug)]
pub struct Staged {
    /// The final path.
    path: PathBuf,
    /// The temporary path, `None` when writing the final path directly (not a regular file)
    /// or once committed.
    tmp: Option<PathBuf>,
    /// The open file, `None` for [`Staged::reserve`].
    file: Option<File>,
}

/// `.NAME.PID.partial` beside `path`.
fn temporary(path: &Path) -> Result<PathBuf> {
    beside(path, "partial", "an output needs a file name")
}

/// `.NAME.PID.SUFFIX` beside `path` (the staging names of files and folders); `nameless` is
/// the error's words for a path without a final name.
pub(super) fn beside(path: &Path, suffix: &str, nameless: &str) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        BridgeError::invalid_argument("path", format!("{}: {nameless}", path.display()))
    })?;
    let mut n = std::ffi::OsString::from(".");
    n.push(name);
    n.push(format!(".{}.{suffix}", std::process::id()));
    Ok(path.with_file_name(n))
}

/// Whether `path` exists as something other than a regular file (then written in place).
fn special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// The temporary files of this process's open [`Staged`] outputs; `closed` once
/// [`remove_open_staging_files`] has run (no new one may be created after it).
pub(super) struct Open {
    tmps: Vec<PathBuf>,
    closed: bool,
}

static OPEN: Mutex<Open> = Mutex::new(Open {
    tmps: Vec::new(),
    closed: false,
});

/// The list of open temporary files (a panic while it was held leaves it usable).
pub(super) fn open_list() -> MutexGuard<'static, Open> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// List `tmp` before it is created. Errors once [`remove_open_staging_files`] has run.
pub(super) fn register(path: &Path, tmp: &Path) -> Result<()> {
    let mut open = open_list();
    if open.closed {
        return Err(BridgeError::io(
            path.display().to_string(),
            std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "the process is ending: no new output is started",
            ),
        ));
    }
    open.tmps.push(tmp.to_path_buf());
    Ok(())
}

/// Remove `tmp` from the list (in `open`, held by the caller).
pub(super) fn unregister(open: &mut Open, tmp: &Path) {
    if let Some(i) = open.tmps.iter().rposition(|t| t == tmp) {
        open.tmps.swap_remove(i);
    }
}

/// Delete the temporary files of every [`Staged`] output of this process not yet renamed into
/// place, and refuse new ones from then on (their creation fails with an i/o error): for a
/// process about to exit on a signal, which runs no destructor. Returns how many files were
/// deleted. Existing final files are untouched (a rename in progress completes first, or its
/// temporary file is gone and the old file stays).
///
/// Not async-signal-safe (it takes a lock and allocates): call it from a normal thread, such
/// as a signal-handling thread, not from inside a signal handler.
pub fn remove_open_staging_files() -> usize {
    let mut open = open_list();
    open.closed = true;
    open.tmps
        .drain(..)
        .filter(|t| {
            // a staged folder (`super::staged_dir`) goes with its contents
            if t.is_dir() {
                std::fs::remove_dir_all(t).is_ok()
            } else {
                std::fs::remove_file(t).is_ok()
            }
        })
        .count()
}

/// Whether `file` is the name of a staging file or folder (`.NAME.PID.partial`).
pub(super) fn is_staging_name(file: &OsStr) -> bool {
    parse_staging_name(file).is_some()
}

/// Per folder (scanned once per process), per final name: the staging files of other
/// processes found there, with their PID.
type Found = HashMap<PathBuf, HashMap<OsString, Vec<(PathBuf, u32)>>>;

static FOUND: Mutex<Option<Found>> = Mutex::new(None);

/// The final name and PID of a staging file name `.NAME.PID.partial` (PID all digits), as
/// [`temporary`] makes them.
fn parse_staging_name(file: &OsStr) -> Option<(OsString, u32)> {
    let rest = file.to_str()?.strip_prefix('.')?.strip_suffix(".partial")?;
    let (name, pid) = rest.rsplit_once('.')?;
    if name.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((OsString::from(name), pid.parse().ok()?))
}

/// Remove the staging files for `path` left in its folder by processes no longer alive
/// (Linux: no `/proc/PID`; nothing is removed where `/proc` is not mounted) and not written for
/// ten minutes (another machine's process on a shared folder has no `/proc/PID` here). The folder is
/// listed once per process; only regular files named exactly `.NAME.PID.partial` for the final
/// name of `path` are considered, never this process's. Failures are ignored.
fn sweep_dead(path: &Path) {
    if !cfg!(target_os = "linux") || !Path::new("/proc/self").exists() {
        return;
    }
    let (Some(name), Some(folder)) = (path.file_name(), path.parent()) else {
        return;
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let own = std::process::id();
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    let by_name = found
        .get_or_insert_with(HashMap::new)
        .entry(folder.to_path_buf())
        .or_insert_with(|| {
            let mut by_name: HashMap<OsString, Vec<(PathBuf, u32)>> = HashMap::new();
            for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
                let Some((target, pid)) = parse_staging_name(&entry.file_name()) else {
                    continue;
                };
                if pid != own && entry.file_type().is_ok_and(|t| t.is_file()) {
                    by_name.entry(target).or_default().push((entry.path(), pid));
                }
            }
            by_name
        });
    for (stale, pid) in by_name.remove(name).unwrap_or_default() {
        if !Path::new("/proc").join(pid.to_string()).exists() && untouched_for_a_while(&stale) {
            let _ = std::fs::remove_file(stale);
        }
    }
}

/// A staging file is swept only when it has not been written for [`STALE_AFTER`]: on a folder
/// shared by several machines (NFS), a process of another machine has no `/proc/PID` here but
/// writes its file as it goes.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

fn untouched_for_a_while(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= STALE_AFTER)
}

impl Staged {
    /// Create the temporary file of `path` (truncated if a stale one is there).
    ///
    /// Errors: [`BridgeError::Io`] naming the final path.
    pub fn create(path: &Path) -> Result<Staged> {
        let io = |e| BridgeError::io(path.display().to_string(), e);
        if special(path) {
            return Ok(Staged {
                path: path.to_path_buf(),
                tmp: None,
                file: Some(File::create(path).map_err(io)?),
            });
        }
        let tmp = temporary(path)?;
        sweep_dead(path);
        register(path, &tmp)?;
        let file = match File::create(&tmp) {
            Ok(f) => f,
            Err(e) => {
                unregister(&mut open_list(), &tmp);
                return Err(io(e));
            }
        };
        Ok(Staged {
            path: path.to_path_buf(),
            tmp: Some(tmp),
            file: Some(file),
        })
    }

    /// A temporary path for a writer that opens files by name itself (FITS): nothing is
    /// created; write [`Staged::write_path`], then [`Staged::commit`]. A stale temporary file
    /// is removed first.
    pub fn reserve(path: &Path) -> Result<Staged> {
        if special(path) {
            return Ok(Staged {
                path: path.to_path_buf(),
                tmp: None,
                file: None,
            });
        }
        let tmp = temporary(path)?;
        sweep_dead(path);
        if tmp.exists() {
            std::fs::remove_file(&tmp)
                .map_err(|e| BridgeError::io(tmp.display().to_string(), e))?;
        }
        register(path, &tmp)?;
        Ok(Staged {
            path: path.to_path_buf(),
            tmp: Some(tmp),
            file: None,
        })
    }

    /// The path being written: the temporary one, or the final one when written directly.
    pub fn write_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flush and close the file and rename it over the final path.
    ///
    /// Errors: [`BridgeError::Io`] naming the final path (the temporary file is removed).
    pub fn commit(mut self) -> Result<()> {
        let io = |e| BridgeError::io(self.path.display().to_string(), e);
        if let Some(mut f) = self.file.take() {
            f.flush().map_err(io)?;
        }
        if let Some(tmp) = self.tmp.take() {
            // under the lock: a concurrent `remove_open_staging_files` runs wholly before
            // (the rename fails, the old file stays) or after (the new file is in place)
            let mut open = open_list();
            let renamed = std::fs::rename(&tmp, &self.path);
            if renamed.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            unregister(&mut open, &tmp);
            renamed.map_err(io)?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.file = None;
        if let Some(tmp) = self.tmp.take() {
            let mut open = open_list();
            let _ = std::fs::remove_file(&tmp);
            unregister(&mut open, &tmp);
        }
    }
}

impl Write for Staged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(std::io::Error::other(
                "a reserved staged path has no open file",
            )),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ab-staged-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn appears_whole_on_commit_and_not_at_all_on_drop() {
        let d = dir("commit");
        let p = d.join("out.csv");
        let mut s = Staged::create(&p).unwrap();
        s.write_all(b"a,b\n").unwrap();
        assert!(!p.exists(), "nothing at the final path before the commit");
        assert_eq!(names(&d).len(), 1);
        s.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"a,b\n");
        assert_eq!(names(&d), vec!["out.csv"]);
        // an abandoned rewrite leaves the old file as it was and no temporary file
        let mut s = Staged::create(&p).unwrap();
        s.write_all(b"partial").unwrap();
        drop(s);
        assert_eq!(std::fs::read(&p).unwrap(), b"a,b\n");
        assert_eq!(names(&d), vec!["out.csv"]);
        // reserve: a path for writers that open by name
        let q = d.join("img.fits");
        let r = Staged::reserve(&q).unwrap();
        std::fs::write(r.write_path(), b"x").unwrap();
        r.commit().unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), b"x");
        let r = Staged::reserve(&q).unwrap();
        std::fs::write(r.write_path(), b"y").unwrap();
        drop(r);
        assert_eq!(std::fs::read(&q).unwrap(), b"x");
        assert_eq!(names(&d), vec!["img.fits", "out.csv"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn staging_names_are_parsed_exactly() {
        let p = |s: &str| parse_staging_name(OsStr::new(s));
        assert_eq!(p(".x.csv.42.partial"), Some((OsString::from("x.csv"), 42)));
        assert_eq!(p(".x.csv.4a.partial"), None);
        assert_eq!(p(".x.csv..partial"), None);
        assert_eq!(p("x.csv.42.partial"), None);
        assert_eq!(p(".x.csv.42.partial.bak"), None);
        assert_eq!(p("..42.partial"), None);
        assert_eq!(p(".x.csv.+42.partial"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stale_staging_files_of_dead_processes_are_swept() {
        let d = dir("sweep");
        let mut live = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let dead = d.join(".x.csv.999999999.partial");
        let alive = d.join(format!(".x.csv.{}.partial", live.id()));
        let other = d.join(".y.csv.999999999.partial");
        let odd = d.join(".x.csv.999999999.partial.keep");
        let recent = d.join(".x.csv.999999998.partial");
        for f in [&dead, &alive, &other, &odd, &recent] {
            std::fs::write(f, b"stale").unwrap();
        }
        // an hour old, but `recent` (a dead PID here, maybe another machine's writer on a
        // shared folder) was written just now
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for f in [&dead, &alive, &other, &odd] {
            let file = std::fs::File::options().write(true).open(f).unwrap();
            file.set_modified(hour_ago).unwrap();
        }
        let mut s = Staged::create(&d.join("x.csv")).unwrap();
        s.write_all(b"new").unwrap();
        s.commit().unwrap();
        assert!(!dead.exists(), "a dead process's staging file is removed");
        assert!(alive.exists(), "a live process's staging file is kept");
        assert!(other.exists(), "another output's staging file is kept");
        assert!(odd.exists(), "a name not of the staging pattern is kept");
        assert!(
            recent.exists(),
            "a file written in the last ten minutes is kept"
        );
        assert_eq!(std::fs::read(d.join("x.csv")).unwrap(), b"new");
        let _ = live.kill();
        let _ = live.wait();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_written_in_place() {
        let s = Staged::create(Path::new("/dev/null")).unwrap();
        assert_eq!(s.write_path(), Path::new("/dev/null"));
        s.commit().unwrap();
        assert!(Path::new("/dev/null").exists());
    }
}
