//! CSV tables with a header row, read and written with the `csv` crate.
//!
//! Reading ([`read_table`], the whole table; [`RowReader`], one row at a time in the memory of
//! one row) accepts what spreadsheet and pandas exports contain: a UTF-8
//! byte-order mark, quoted fields (with `""` escapes and embedded commas or line breaks), LF or
//! CRLF line ends, and blank lines (skipped). A row with another number of fields than the
//! header is an error naming its line. Fields are kept exactly as read (no trimming), so a table
//! can be written back unchanged; lookups ([`Table::column`]) and numbers ([`Table::f64`],
//! [`Table::frame`]) ignore surrounding spaces.
//!
//! Writing ([`create_writer`]) produces LF line ends and quotes a field only when it needs it
//! (a comma, a quote or a line break in it), so numeric tables are plain `a,b,c` lines.
//!
//! Every error is a [`BridgeError`]: [`BridgeError::Io`] (with the path) when the file cannot
//! be opened, read or written, [`BridgeError::InvalidInput`] for bad content, with the file,
//! the line number as an editor shows it (1-based, the header is line 1) and the column.
//!
//! ```no_run
//! # fn main() -> bridge_core::Result<()> {
//! use std::path::Path;
//!
//! use arraybridge::io::csv::{create_writer, read_table};
//! let t = read_table(Path::new("detections.csv"))?;
//! let (cf, cy) = (t.column("frame")?, t.column("y")?);
//! let mut w = create_writer(Path::new("out.csv"))?;
//! w.write_record(["frame", "y"])?;
//! for r in 0..t.rows.len() {
//!     let (f, y) = (t.frame(r, cf)?, t.f64(r, cy)?);
//!     w.write_record([f.to_string(), y.to_string()])?;
//! }
//! w.finish()?;
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::staged::Staged;
use bridge_core::host::{Budget, format_bytes};
use bridge_core::{BridgeError, Result};

/// A row as read: its fields, and its line in [`::csv::Position::line`] ([`RowReader::line`]).
pub use ::csv::StringRecord;

/// Largest frame number magnitude accepted by [`Table::frame`]: 2^53, the range in which every
/// integer is exactly representable as an `f64` (the type pandas and NumPy give such columns).
pub const MAX_FRAME: i64 = 1 << 53;

/// A CSV table: the header and the data rows, every field as read.
#[derive(Debug, Clone)]
pub struct Table {
    /// The file, as shown in messages.
    pub path: String,
    /// Column names as read (a byte-order mark removed, spaces kept).
    pub header: Vec<String>,
    /// Data rows, each with exactly `header.len()` fields; [`Table::line`] gives the line of
    /// each in the file.
    pub rows: Vec<::csv::StringRecord>,
}

/// Lines longer than this (bytes between two line ends) are refused: no table has them, and a
/// stream without line ends (`/dev/zero`) would otherwise be buffered whole.
pub const MAX_LINE: u64 = 64 << 20;

/// Read a CSV file with a header row (see the module documentation for what is accepted).
///
/// The file is parsed as it is read; the rows are kept (memory about twice the file's size),
/// so a file that cannot fit in the host memory budget ([`bridge_core::host::Budget`]) is
/// refused with [`BridgeError::TooLarge`]: up front for a regular file, once half the budget
/// has been read for a stream (a pipe, a device). [`RowReader`] reads one row at a time
/// instead, in the memory of one row.
///
/// Errors: [`BridgeError::Io`] when the file cannot be read; [`BridgeError::TooLarge`];
/// [`BridgeError::InvalidInput`] for an empty file, text that is not UTF-8, a line longer than
/// [`MAX_LINE`], or a row whose field count differs from the header's (naming the line).
pub fn read_table(path: &Path) -> Result<Table> {
    let mut rd = RowReader::open_with(path, Keep::All)?;
    let mut rows = Vec::new();
    let mut record = ::csv::StringRecord::new();
    while rd.read_row(&mut record)? {
        rows.push(record.clone());
    }
    Ok(Table {
        path: rd.path,
        header: rd.header,
        rows,
    })
}

/// What the reader of a file keeps, which sets how much of the budget it may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Every row ([`read_table`]): the file may be at most half the budget.
    All,
    /// One row at a time ([`RowReader`]): a line may be at most half the budget.
    Row,
}

/// A CSV file with a header row read one row at a time: the same dialect, checks and messages
/// as [`read_table`], in the memory of one row, whatever the file's length.
///
/// ```no_run
/// # fn main() -> bridge_core::Result<()> {
/// use std::path::Path;
///
/// use arraybridge::io::csv::RowReader;
/// let mut rd = RowReader::open(Path::new("detections.csv"))?;
/// let (cf, cy) = (rd.column("frame")?, rd.column("y")?);
/// let mut row = arraybridge::io::csv::StringRecord::new();
/// while rd.read_row(&mut row)? {
///     let (f, y) = (rd.frame(&row, cf)?, rd.f64(&row, cy)?);
///     println!("line {}: frame {f}, y {y}", RowReader::line(&row));
/// }
/// # Ok(())
/// # }
/// ```
pub struct RowReader {
    path: String,
    header: Vec<String>,
    rd: ::csv::Reader<Lines<File>>,
}

impl std::fmt::Debug for RowReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowReader")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl RowReader {
    /// Open `path` and read its header row.
    ///
    /// Only the row being read is held: a line longer than half the host memory budget (or
    /// [`MAX_LINE`]) is refused, a long file is not.
    ///
    /// Errors: [`BridgeError::Io`] when the file cannot be opened or read;
    /// [`BridgeError::TooLarge`] for a line longer than half the budget;
    /// [`BridgeError::InvalidInput`] for an empty file, a header that is not UTF-8 or is
    /// longer than [`MAX_LINE`].
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, Keep::Row)
    }

    fn open_with(path: &Path, keep: Keep) -> Result<Self> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
        let budget = Budget::current();
        let half = budget.limit.0 / 2;
        let lines = match keep {
            Keep::All => {
                let size = file
                    .metadata()
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| m.len());
                if let Some(len) = size {
                    let what = format!("{name} ({}, read and kept)", format_bytes(len));
                    budget.check(len.saturating_mul(2), &what, TOO_LARGE_HINT)?;
                }
                Lines::new(file, half, u64::MAX)
            }
            Keep::Row => Lines::new(file, u64::MAX, half.max(1)),
        };
        let mut rd = ::csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .from_reader(lines);
        let header: Vec<String> = match rd.headers() {
            Ok(h) => h.iter().map(str::to_string).collect(),
            Err(e) => return Err(csv_error(&name, Some(rd.get_mut()), e)),
        };
        if header.iter().all(|h| h.trim().is_empty()) {
            return Err(BridgeError::InvalidInput(
                format!("{name}: empty CSV (the first line must be a header naming the columns)")
                    .into(),
            ));
        }
        let next = rd.position().byte();
        rd.get_mut().row_start = next;
        Ok(RowReader {
            path: name,
            header,
            rd,
        })
    }

    /// The file, as shown in messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Column names as read (a byte-order mark removed, spaces kept).
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// Read the next data row into `record` (blank lines skipped); `false` at the end of the
    /// file. The record's position holds its line ([`RowReader::line`]).
    ///
    /// Errors: as [`read_table`]'s for the row (ragged rows name their line), and
    /// [`BridgeError::TooLarge`] for a line longer than half the budget.
    pub fn read_row(&mut self, record: &mut ::csv::StringRecord) -> Result<bool> {
        loop {
            match self.rd.read_record(record) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => return Err(csv_error(&self.path, Some(self.rd.get_mut()), e)),
            }
            let next = self.rd.position().byte();
            self.rd.get_mut().row_start = next;
            if let Some(p) = record.position() {
                let mut p = p.clone();
                p.set_line(self.rd.get_mut().line_at(p.byte()));
                record.set_position(Some(p));
            }
            if record.len() == 1 && record[0].trim().is_empty() {
                continue; // a line of spaces only: blank
            }
            if record.len() != self.header.len() {
                return Err(BridgeError::InvalidInput(
                    format!(
                        "{}:{}: {} field(s), the header has {} (every row needs one value per \
                     column; quote fields that contain a comma)",
                        self.path,
                        line_of(record),
                        record.len(),
                        self.header.len()
                    )
                    .into(),
                ));
            }
            return Ok(true);
        }
    }

    /// The line of a row read by [`RowReader::read_row`] (1-based; the header is line 1).
    pub fn line(record: &::csv::StringRecord) -> u64 {
        line_of(record)
    }

    /// Index of the column named `name`, as [`Table::column`].
    pub fn column(&self, name: &str) -> Result<usize> {
        column_in(&self.path, &self.header, name)
    }

    /// Whether a column named `name` exists (surrounding spaces ignored).
    pub fn has_column(&self, name: &str) -> bool {
        self.header.iter().any(|h| h.trim() == name)
    }

    /// Field `col` of `record` as a number, as [`Table::f64`].
    pub fn f64(&self, record: &::csv::StringRecord, col: usize) -> Result<f64> {
        field_f64(&self.path, &self.header, record, col)
    }

    /// Field `col` of `record` as a finite number, as [`Table::finite_f64`].
    pub fn finite_f64(&self, record: &::csv::StringRecord, col: usize) -> Result<f64> {
        field_finite_f64(&self.path, &self.header, record, col)
    }

    /// Field `col` of `record` as a frame number, as [`Table::frame`].
    pub fn frame(&self, record: &::csv::StringRecord, col: usize) -> Result<i64> {
        field_frame(&self.path, &self.header, record, col)
    }
}

const TOO_LARGE_HINT: &str = "split the table into smaller files";

/// The reader under the CSV parser: counts line ends, to give each record the line it starts
/// on (the `csv` crate's positions count lines only up to where the previous record stopped,
/// before its line end and any blank lines), and stops at [`MAX_LINE`], at `cap` bytes, and at
/// a row (from `row_start`) longer than `row_cap` bytes.
struct Lines<R> {
    inner: R,
    /// Bytes handed to the parser so far.
    offset: u64,
    /// Line ends seen so far (`\n`, `\r\n`, or a lone `\r`, as the parser counts them).
    breaks: u64,
    /// The previous byte.
    prev: u8,
    /// Bytes since the last line end.
    line_len: u64,
    /// Start offset and preceding line ends of each non-empty line not yet asked about.
    starts: VecDeque<(u64, u64)>,
    /// Bytes the parser may read.
    cap: u64,
    /// Bytes a row may have before the budget refuses it (held while it is parsed; quoted line
    /// breaks make a row of many lines).
    row_cap: u64,
    /// Where the row being parsed starts (set by [`RowReader`] after each row).
    row_start: u64,
    /// Why reading stopped early, if it did.
    stop: Option<BridgeError>,
}

impl<R: Read> Lines<R> {
    fn new(inner: R, cap: u64, row_cap: u64) -> Self {
        Lines {
            inner,
            offset: 0,
            breaks: 0,
            prev: b'\n',
            line_len: 0,
            starts: VecDeque::new(),
            cap,
            row_cap,
            row_start: 0,
            stop: None,
        }
    }

    /// The line (1-based) of the record whose reading started at byte `from`: the record
    /// begins at the first byte from there on that is not a line end. Asked in ascending order.
    fn line_at(&mut self, from: u64) -> u64 {
        while self.starts.front().is_some_and(|s| s.0 < from) {
            self.starts.pop_front();
        }
        self.starts
            .front()
            .map_or(self.breaks, |&(_, before)| before)
            + 1
    }

    fn refuse(&mut self, e: BridgeError) -> std::io::Error {
        let msg = e.to_string();
        self.stop = Some(e);
        std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
    }
}

impl<R: Read> Read for Lines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.offset > self.cap {
            let e = BridgeError::TooLarge {
                what: String::new(), // named by `csv_error`
                requested: self.offset.saturating_mul(2),
                limit: self.cap.saturating_mul(2),
                limited_by: Budget::current().limit.1.to_string(),
                hint: TOO_LARGE_HINT.to_string(),
            };
            return Err(self.refuse(e));
        }

        let n = self.inner.read(buf)?;
        for (k, &b) in buf[..n].iter().enumerate() {
            // a line end is counted at its `\n`, or at the byte after a lone `\r`
            if b == b'\n' || self.prev == b'\r' {
                self.breaks += 1;
            }
            if b == b'\n' || b == b'\r' {
                self.line_len = 0;
            } else {
                if self.line_len == 0 {
                    self.starts.push_back((self.offset + k as u64, self.breaks));
                }
                self.line_len += 1;
                if self.line_len > MAX_LINE {
                    let e = BridgeError::InvalidInput(
                        format!(
                            "line {} is longer than {} (not a CSV table?)",
                            self.breaks + 1,
                            format_bytes(MAX_LINE)
                        )
                        .into(),
                    );
                    return Err(self.refuse(e));
                }
            }
            self.prev = b;
        }
        self.offset += n as u64;
        let held = self.offset.saturating_sub(self.row_start);
        if held > self.row_cap {
            let line = self.line_at(self.row_start);
            let e = BridgeError::TooLarge {
                what: format!(
                    "the row from line {line} on, longer than half the budget (held while it \
                     is read)"
                ),
                requested: held.saturating_mul(2),
                limit: self.row_cap.saturating_mul(2),
                limited_by: Budget::current().limit.1.to_string(),
                hint: "no table has such lines: is it a CSV file?".to_string(),
            };
            return Err(self.refuse(e));
        }
        Ok(n)
    }
}

fn line_of(record: &::csv::StringRecord) -> u64 {
    record.position().map_or(0, ::csv::Position::line)
}

/// A `csv` crate error as a [`BridgeError`] naming the file (and the line when known).
fn csv_error<R: Read>(name: &str, lines: Option<&mut Lines<R>>, e: ::csv::Error) -> BridgeError {
    let mut lines = lines;
    if let Some(stop) = lines.as_mut().and_then(|l| l.stop.take()) {
        return match stop {
            BridgeError::TooLarge {
                what,
                requested,
                limit,
                limited_by,
                hint,
            } => BridgeError::TooLarge {
                what: if what.is_empty() {
                    format!("{name} (a stream longer than half the budget, read and kept)")
                } else {
                    format!("{name}: {what}")
                },
                requested,
                limit,
                limited_by,
                hint,
            },
            BridgeError::InvalidInput(m) => {
                BridgeError::InvalidInput(format!("{name}: {m}").into())
            }
            other => other,
        };
    }
    let at = match (e.position(), lines) {
        (Some(p), Some(l)) => format!("{name}:{}", l.line_at(p.byte())),
        _ => name.to_string(),
    };
    let text = e.to_string();
    match e.into_kind() {
        ::csv::ErrorKind::Io(io) => BridgeError::io(name.to_string(), io),
        ::csv::ErrorKind::Utf8 { err, .. } => BridgeError::InvalidInput(
            format!(
                "{at}: field {} is not valid UTF-8 (save the file as UTF-8)",
                err.field() + 1
            )
            .into(),
        ),
        ::csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => BridgeError::InvalidInput(
            format!("{at}: {len} field(s), expected {expected_len} like the header").into(),
        ),
        _ => BridgeError::InvalidInput(format!("{at}: {text}").into()),
    }
}

impl Table {
    /// Index of the column named `name` (surrounding spaces in the header ignored).
    ///
    /// Errors ([`BridgeError::InvalidInput`]) when no column or more than one has that name;
    /// the message lists the available columns.
    pub fn column(&self, name: &str) -> Result<usize> {
        column_in(&self.path, &self.header, name)
    }

    /// Whether a column named `name` exists (surrounding spaces ignored).
    pub fn has_column(&self, name: &str) -> bool {
        self.header.iter().any(|h| h.trim() == name)
    }

    /// The line of data row `row` in the file (1-based; the header is line 1, blank lines and
    /// line breaks inside quoted fields counted).
    ///
    /// # Panics
    /// Where `row` is not a data row (`row >= self.len()`), as slice indexing does.
    pub fn line(&self, row: usize) -> u64 {
        line_of(&self.rows[row])
    }

    /// Field `col` of data row `row`, as read.
    ///
    /// # Panics
    /// Where `row` or `col` is out of range, as slice indexing does.
    pub fn field(&self, row: usize, col: usize) -> &str {
        &self.rows[row][col]
    }

    /// Data row `row`, or an [`BridgeError::InvalidArgument`] naming the rows there are.
    fn record(&self, row: usize) -> Result<&::csv::StringRecord> {
        self.rows.get(row).ok_or_else(|| {
            BridgeError::invalid_argument(
                "row",
                format!("{}: row {row} of {} data rows", self.path, self.rows.len()),
            )
        })
    }

    /// Field `col` of data row `row` as a number (surrounding spaces ignored; `nan` and `inf`
    /// are numbers, check finiteness where it matters).
    ///
    /// Errors ([`BridgeError::InvalidInput`]) name the file, line, column and value.
    pub fn f64(&self, row: usize, col: usize) -> Result<f64> {
        field_f64(&self.path, &self.header, self.record(row)?, col)
    }

    /// Field `col` of data row `row` as a finite number (as [`Table::f64`], and `nan`/`inf`
    /// are errors too).
    pub fn finite_f64(&self, row: usize, col: usize) -> Result<f64> {
        field_finite_f64(&self.path, &self.header, self.record(row)?, col)
    }

    /// Every value of the column named `name` as a number ([`Table::column`], [`Table::f64`]).
    pub fn f64_column(&self, name: &str) -> Result<Vec<f64>> {
        let c = self.column(name)?;
        (0..self.rows.len()).map(|r| self.f64(r, c)).collect()
    }

    /// Field `col` of data row `row` as a frame number: an integer with |value| ≤
    /// [`MAX_FRAME`] (2^53), written as an integer (`12`) or as a float with an integral value
    /// (`12.0`, `1.2e1`, as pandas and NumPy write integer columns that went through `float`).
    ///
    /// Errors ([`BridgeError::InvalidInput`]) name the file, line, column and value, for a
    /// non-number, a fraction, `nan`/`inf` and values out of the range (such as `1e19`).
    pub fn frame(&self, row: usize, col: usize) -> Result<i64> {
        field_frame(&self.path, &self.header, self.record(row)?, col)
    }
}

// The lookups and parsers shared by `Table` (rows kept) and `RowReader` (one row at a time).

fn columns_list(header: &[String]) -> String {
    header
        .iter()
        .map(|h| h.trim())
        .collect::<Vec<_>>()
        .join(", ")
}

fn column_in(path: &str, header: &[String], name: &str) -> Result<usize> {
    let mut found = header
        .iter()
        .enumerate()
        .filter(|(_, h)| h.trim() == name)
        .map(|(i, _)| i);
    match (found.next(), found.next()) {
        (Some(i), None) => Ok(i),
        (None, _) => Err(BridgeError::InvalidInput(
            format!(
                "{path}: no column {name:?} (columns: {})",
                columns_list(header)
            )
            .into(),
        )),
        (Some(a), Some(b)) => Err(BridgeError::InvalidInput(
            format!(
                "{path}: column {name:?} appears more than once (columns {} and {} of: {})",
                a + 1,
                b + 1,
                columns_list(header)
            )
            .into(),
        )),
    }
}

/// `file:line: column NAME` prefix of the messages about one field.
fn at(path: &str, header: &[String], record: &::csv::StringRecord, col: usize) -> String {
    let name = header.get(col).map_or("?", |h| h.trim());
    format!("{path}:{}: column {name}", line_of(record))
}

fn field_f64(
    path: &str,
    header: &[String],
    record: &::csv::StringRecord,
    col: usize,
) -> Result<f64> {
    let v = record.get(col).ok_or_else(|| {
        BridgeError::invalid_argument(
            "col",
            format!(
                "{path}:{}: column {col} of {} columns",
                line_of(record),
                record.len()
            ),
        )
    })?;
    v.trim().parse::<f64>().map_err(|_| {
        BridgeError::InvalidInput(
            format!("{}: {v:?} is not a number", at(path, header, record, col)).into(),
        )
    })
}

fn field_finite_f64(
    path: &str,
    header: &[String],
    record: &::csv::StringRecord,
    col: usize,
) -> Result<f64> {
    let x = field_f64(path, header, record, col)?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(BridgeError::InvalidInput(
            format!(
                "{}: {:?} is not a finite number",
                at(path, header, record, col),
                &record[col]
            )
            .into(),
        ))
    }
}

fn field_frame(
    path: &str,
    header: &[String],
    record: &::csv::StringRecord,
    col: usize,
) -> Result<i64> {
    // the column's presence checked as `field_f64` checks it
    let v = match record.get(col) {
        Some(v) => v.trim(),
        None => return field_f64(path, header, record, col).map(|_| 0),
    };
    let bad = |why: &str| {
        BridgeError::InvalidInput(
            format!(
                "{}: frame {v:?} {why} (frame numbers must be integers between -2^53 and 2^53 \
             = {MAX_FRAME})",
                at(path, header, record, col)
            )
            .into(),
        )
    };
    if let Ok(i) = v.parse::<i64>() {
        return if i.unsigned_abs() <= MAX_FRAME as u64 {
            Ok(i)
        } else {
            Err(bad("is out of range"))
        };
    }
    let x = v.parse::<f64>().map_err(|_| bad("is not a number"))?;
    if !x.is_finite() {
        Err(bad("is not finite"))
    } else if x.fract() != 0.0 {
        Err(bad("is not an integer"))
    } else if x.abs() > MAX_FRAME as f64 {
        Err(bad("is out of range"))
    } else {
        Ok(x as i64)
    }
}

/// A CSV file being written (see [`create_writer`]). Call [`TableWriter::finish`] at the end:
/// it flushes, reports the last write errors and puts the file in place; a writer dropped
/// without it (an error midway) leaves no file behind.
#[derive(Debug)]
pub struct TableWriter {
    path: String,
    inner: ::csv::Writer<Staged>,
}

/// A number a CSV field holds without quoting: its text (Rust's `Display`, as `to_string`:
/// the shortest digits that read back to the same value for floats, `NaN`, `inf`) never holds
/// a comma, a quote or a line break.
pub trait CsvNumber: std::fmt::Display + Copy {}
impl CsvNumber for f64 {}
impl CsvNumber for f32 {}
impl CsvNumber for u8 {}
impl CsvNumber for u16 {}
impl CsvNumber for u32 {}
impl CsvNumber for u64 {}
impl CsvNumber for usize {}
impl CsvNumber for i32 {}
impl CsvNumber for i64 {}

/// One row of [`TableWriter::write_number_rows`]: its fields, in order.
#[derive(Debug)]
pub struct NumberRow<'a> {
    /// The block's text: its fields one after the other.
    text: &'a mut String,
    /// Where each field of the block ends in `text`.
    ends: &'a mut Vec<usize>,
}

impl NumberRow<'_> {
    /// The next field: `v` as `v.to_string()` writes it.
    pub fn num(&mut self, v: impl CsvNumber) {
        use std::fmt::Write as _;
        // writing to a String cannot fail
        let _ = write!(self.text, "{v}");
        self.ends.push(self.text.len());
    }

    /// The next field, empty.
    pub fn empty(&mut self) {
        self.ends.push(self.text.len());
    }
}

/// The rows of one block of [`TableWriter::write_number_rows`]: their fields' text, where each
/// field ends, and how many fields each row has.
struct NumberBlock {
    text: String,
    ends: Vec<usize>,
    widths: Vec<usize>,
}

/// Items per block of [`TableWriter::write_number_rows`] (one block is one parallel task).
const NUMBER_ROWS_BLOCK: usize = 4096;

/// Start writing CSV to `path`: LF line ends, fields quoted only when needed. The table is
/// written under a temporary name in the same folder and appears at `path` whole, when
/// [`TableWriter::finish`] succeeds ([`super::staged`]): a run that fails midway leaves no
/// partial table (and an existing file at `path` unchanged).
///
/// Errors: [`BridgeError::Io`] naming the path.
pub fn create_writer(path: &Path) -> Result<TableWriter> {
    let name = path.display().to_string();
    let file = Staged::create(path)?;
    Ok(TableWriter {
        inner: ::csv::WriterBuilder::new().from_writer(file),
        path: name,
    })
}

impl TableWriter {
    /// Write one row (the header is the first row written). Every row should have the same
    /// number of fields; a different count is an [`BridgeError::InvalidInput`].
    pub fn write_record<I, T>(&mut self, fields: I) -> Result<()>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        let path = &self.path;
        self.inner
            .write_record(fields)
            .map_err(|e| csv_error::<File>(path, None, e))
    }

    /// Write one row of numbers per item, `row` giving its fields: the same rows, with the same
    /// checks, as [`TableWriter::write_record`] with each number's `to_string()`, but the
    /// numbers are formatted in parallel and without a `String` per field (formatting floats
    /// is most of the cost of writing a large table of detections); the `csv` writer still
    /// writes every row. After an error the table is unfinished: drop the writer (no file is
    /// left, see [`create_writer`]).
    pub fn write_number_rows<T: Sync>(
        &mut self,
        items: &[T],
        row: impl Fn(&T, &mut NumberRow<'_>) + Sync,
    ) -> Result<()> {
        use rayon::prelude::*;
        let blocks: Vec<NumberBlock> = items
            .par_chunks(NUMBER_ROWS_BLOCK)
            .map(|items| {
                let mut b = NumberBlock {
                    text: String::with_capacity(items.len() * 48),
                    ends: Vec::with_capacity(items.len() * 8),
                    widths: Vec::with_capacity(items.len()),
                };
                for it in items {
                    let before = b.ends.len();
                    row(
                        it,
                        &mut NumberRow {
                            text: &mut b.text,
                            ends: &mut b.ends,
                        },
                    );
                    b.widths.push(b.ends.len() - before);
                }
                b
            })
            .collect();
        for b in &blocks {
            let (mut field, mut start) = (0, 0);
            for &n in &b.widths {
                let ends = &b.ends[field..field + n];
                self.write_record(ends.iter().map(|&end| {
                    let f = &b.text.as_bytes()[start..end];
                    start = end;
                    f
                }))?;
                field += n;
            }
        }
        Ok(())
    }

    /// Write one row from a `serde::Serialize` value (a struct writes its field values; its
    /// field names are written first as a header when this is the first row).
    pub fn serialize<S: serde::Serialize>(&mut self, row: S) -> Result<()> {
        let path = &self.path;
        self.inner
            .serialize(row)
            .map_err(|e| csv_error::<File>(path, None, e))
    }

    /// The file, as shown in messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Flush everything and put the file in place (renamed over the final path).
    pub fn finish(mut self) -> Result<()> {
        self.inner
            .flush()
            .map_err(|e| BridgeError::io(self.path.clone(), e))?;
        let staged = self
            .inner
            .into_inner()
            .map_err(|e| BridgeError::io(self.path.clone(), e.into_error()))?;
        staged.commit()
    }
}

#[cfg(test)]
mod tests;
