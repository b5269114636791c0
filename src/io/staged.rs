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

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    let name = path.file_name().ok_or_else(|| {
        BridgeError::invalid_argument(
            "path",
            format!("{}: an output needs a file name", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.partial", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// Whether `path` exists as something other than a regular file (then written in place).
fn special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
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
        let file = File::create(&tmp).map_err(io)?;
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
        if tmp.exists() {
            std::fs::remove_file(&tmp)
                .map_err(|e| BridgeError::io(tmp.display().to_string(), e))?;
        }
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
        if let Some(tmp) = &self.tmp {
            std::fs::rename(tmp, &self.path).map_err(io)?;
        }
        self.tmp = None;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.file = None;
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
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

    #[cfg(unix)]
    #[test]
    fn special_files_are_written_in_place() {
        let s = Staged::create(Path::new("/dev/null")).unwrap();
        assert_eq!(s.write_path(), Path::new("/dev/null"));
        s.commit().unwrap();
        assert!(Path::new("/dev/null").exists());
    }
}
