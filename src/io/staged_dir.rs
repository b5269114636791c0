//! Output folders that are replaced as a whole or not at all.
//!
//! A command that writes a set of files into a folder (`arraybridge paco -o DIR`) writes them
//! into a staging folder beside it (`.DIR.PID.partial`), then [`StagedDir::commit`] puts the
//! staging folder in the place of `DIR`: the old folder is renamed aside
//! (`.DIR.PID.old`), the new one renamed in, and the old one removed. A reader never sees a
//! mix of two runs: at every moment `DIR` is the whole old set, the whole new set, or (between
//! the two renames, should the process be killed right there) absent, with both sets whole
//! beside it. Dropped without a commit (an error midway, a panic), the staging folder is
//! removed, and the old folder is untouched; a process ending on SIGINT or SIGTERM removes it
//! too ([`super::staged::remove_open_staging_files`]).
//!
//! Only a folder this tool wrote may be replaced: the committed folder holds a manifest
//! ([`MANIFEST`]) listing its files, and [`check_replaceable`] refuses an existing folder that
//! is not empty and has no manifest, or holds files the manifest does not list (the user's own
//! files are never deleted or overwritten).

use std::path::{Path, PathBuf};

use bridge_core::{BridgeError, Result};

use super::staged::{open_list, register, unregister};

/// The manifest of a folder written by [`StagedDir`]: its first line says which command
/// wrote it, then one file name per line.
pub const MANIFEST: &str = ".arraybridge-output";

/// A folder being written under a temporary name beside its final path.
#[derive(Debug)]
pub struct StagedDir {
    /// The final folder.
    path: PathBuf,
    /// The staging folder; `None` once committed.
    tmp: Option<PathBuf>,
    /// The command, for the manifest.
    what: String,
}

/// `.NAME.PID.SUFFIX` beside `path`.
fn beside(path: &Path, suffix: &str) -> Result<PathBuf> {
    super::staged::beside(path, suffix, "an output folder needs a name")
}

/// The files a manifest lists (`None`: no manifest, or not one of ours).
fn manifest(dir: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(MANIFEST)).ok()?;
    let mut lines = text.lines();
    let head = lines.next()?;
    if !(head.starts_with("arraybridge ") && head.ends_with(" output")) {
        return None;
    }
    Some(lines.map(str::to_owned).collect())
}

/// `Ok` when `dir` may be replaced as a whole by `what`'s output: it does not exist, is an
/// empty folder, or is a folder written by this tool whose manifest lists every file in it.
/// Otherwise [`BridgeError::InvalidInput`] naming the files that are not ours (`flag` is the
/// option that named the folder).
pub fn check_replaceable(dir: &Path, flag: &str) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(()); // absent (or unreadable: creating it will say why)
    };
    let listed = manifest(dir);
    let mut foreign: Vec<String> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name == MANIFEST
            || listed.as_ref().is_some_and(|l| l.contains(&name))
            || super::staged::is_staging_name(&e.file_name());
        if !ours {
            foreign.push(name);
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let shown: Vec<&str> = foreign.iter().take(5).map(String::as_str).collect();
    let more = if foreign.len() > 5 {
        format!(" and {} more", foreign.len() - 5)
    } else {
        String::new()
    };
    Err(BridgeError::invalid_argument(
        flag,
        format!(
            "{} holds files arraybridge did not write there ({}{more}); the output folder is \
             replaced as a whole, so choose a new or empty folder",
            dir.display(),
            shown.join(", ")
        ),
    ))
}

impl StagedDir {
    /// Create the staging folder of `path` (an old staging folder of this process, if any, is
    /// removed first). `what` names the command in the manifest.
    ///
    /// Errors: [`BridgeError::Io`] naming the final folder.
    pub fn create(path: &Path, what: &str) -> Result<StagedDir> {
        let tmp = beside(path, "partial")?;
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)
                .map_err(|e| BridgeError::io(tmp.display().to_string(), e))?;
        }
        register(path, &tmp)?;
        if let Err(e) = std::fs::create_dir(&tmp) {
            unregister(&mut open_list(), &tmp);
            return Err(BridgeError::io(
                format!("{} (cannot create its staging folder)", path.display()),
                e,
            ));
        }
        Ok(StagedDir {
            path: path.to_path_buf(),
            tmp: Some(tmp),
            what: what.to_owned(),
        })
    }

    /// The folder to write the files into.
    pub fn write_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// The final folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `e` with the staging folder's path written as the final folder's (what a user named):
    /// for errors of the writers of files inside [`Self::write_path`].
    pub fn name_final(&self, e: BridgeError) -> BridgeError {
        let Some(tmp) = self.tmp.as_deref() else {
            return e;
        };
        let (from, to) = (tmp.display().to_string(), self.path.display().to_string());
        match e {
            BridgeError::Io { path, source } => BridgeError::Io {
                path: path.replace(&from, &to),
                source,
            },
            BridgeError::InvalidInput(m) => BridgeError::InvalidInput(m.replace(&from, &to).into()),
            other => other,
        }
    }

    /// Write the manifest, then put the staging folder in place of the final one (see the
    /// [module docs](self)).
    ///
    /// Errors: [`BridgeError::Io`] naming the final folder; the old folder is then in place
    /// (or, if the second rename failed, restored), and the staging folder removed.
    pub fn commit(mut self) -> Result<()> {
        let Some(tmp) = self.tmp.take() else {
            return Ok(());
        };
        let io = |e, what: &str| BridgeError::io(format!("{} ({what})", self.path.display()), e);
        let mut open = open_list();
        let result = (|| {
            let mut names: Vec<String> = std::fs::read_dir(&tmp)
                .map_err(|e| io(e, "cannot list its staging folder"))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let text = format!("arraybridge {} output\n{}\n", self.what, names.join("\n"));
            std::fs::write(tmp.join(MANIFEST), text)
                .map_err(|e| io(e, "cannot write its manifest"))?;
            if !self.path.exists() {
                return std::fs::rename(&tmp, &self.path)
                    .map_err(|e| io(e, "cannot rename its staging folder into place"));
            }
            let old = beside(&self.path, "old")?;
            if old.exists() {
                std::fs::remove_dir_all(&old).map_err(|e| io(e, "cannot remove an old copy"))?;
            }
            std::fs::rename(&self.path, &old)
                .map_err(|e| io(e, "cannot move the previous output aside"))?;
            if let Err(e) = std::fs::rename(&tmp, &self.path) {
                let _ = std::fs::rename(&old, &self.path);
                return Err(io(e, "cannot rename its staging folder into place"));
            }
            // the new set is in place; the old one goes (a failure here leaves it beside)
            let _ = std::fs::remove_dir_all(&old);
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        unregister(&mut open, &tmp);
        result
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let mut open = open_list();
            let _ = std::fs::remove_dir_all(&tmp);
            unregister(&mut open, &tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ab-staged-dir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_folder_is_replaced_whole_and_a_failed_run_leaves_the_old_one() {
        let root = dir("whole");
        let out = root.join("out");
        check_replaceable(&out, "-o").unwrap();
        let s = StagedDir::create(&out, "test").unwrap();
        std::fs::write(s.write_path().join("a.fits"), "1").unwrap();
        std::fs::write(s.write_path().join("extra.csv"), "1").unwrap();
        assert!(!out.exists(), "nothing appears before the commit");
        s.commit().unwrap();
        assert_eq!(names(&out), [MANIFEST, "a.fits", "extra.csv"]);
        // a second run replaces the whole set (extra.csv is gone)
        check_replaceable(&out, "-o").unwrap();
        let s = StagedDir::create(&out, "test").unwrap();
        std::fs::write(s.write_path().join("a.fits"), "2").unwrap();
        s.commit().unwrap();
        assert_eq!(names(&out), [MANIFEST, "a.fits"]);
        assert_eq!(std::fs::read_to_string(out.join("a.fits")).unwrap(), "2");
        // a run that fails midway leaves the old set and no staging folder
        let s = StagedDir::create(&out, "test").unwrap();
        std::fs::write(s.write_path().join("a.fits"), "3").unwrap();
        drop(s);
        assert_eq!(std::fs::read_to_string(out.join("a.fits")).unwrap(), "2");
        assert_eq!(names(&root), ["out"]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn folders_with_files_we_did_not_write_are_refused() {
        let root = dir("foreign");
        let out = root.join("out");
        std::fs::create_dir_all(&out).unwrap();
        check_replaceable(&out, "-o").unwrap(); // empty
        std::fs::write(out.join("a.fits"), "mine").unwrap();
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        let e = check_replaceable(&out, "-o").unwrap_err().to_string();
        assert!(
            e.contains("a.fits, notes.txt") && e.contains("new or empty"),
            "{e}"
        );
        // ours, plus a file the user added later
        let ours = root.join("ours");
        let s = StagedDir::create(&ours, "test").unwrap();
        std::fs::write(s.write_path().join("a.fits"), "1").unwrap();
        s.commit().unwrap();
        check_replaceable(&ours, "-o").unwrap();
        std::fs::write(ours.join("notes.txt"), "mine").unwrap();
        let e = check_replaceable(&ours, "-o").unwrap_err().to_string();
        assert!(e.contains("notes.txt") && !e.contains("a.fits"), "{e}");
        std::fs::remove_dir_all(root).unwrap();
    }
}
