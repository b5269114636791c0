#![allow(clippy::unwrap_used)]
use super::*;

fn table(name: &str, bytes: &[u8]) -> Result<Table> {
    let d = std::env::temp_dir().join(format!("ab-io-csv-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    std::fs::write(&p, bytes).unwrap();
    read_table(&p)
}

/// Rows written by `write_number_rows` are the bytes `write_record` writes with each
/// number's `to_string()`: random floats of every magnitude and sign, NaN, infinities, ±0,
/// integers, empty fields, rows of one empty field, more rows than one parallel block; a
/// row of another width is refused as `write_record` refuses it (the table is then left
/// unfinished: dropped, it leaves no file).
#[test]
fn number_rows_equal_the_records_written_one_by_one() {
    let d = std::env::temp_dir().join(format!("ab-io-csv-num-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1e300,
        -5e-324,
    ];
    let rows: Vec<(u32, f64, f64, i64, bool)> = (0..NUMBER_ROWS_BLOCK * 2 + 77)
        .map(|i| {
            let bits = next();
            let f = if i % 11 == 0 {
                specials[i % specials.len()]
            } else {
                f64::from_bits(bits >> 2).min(1e300) * if bits & 1 == 0 { 1.0 } else { -1.0 }
            };
            let g = (next() % 100_000) as f64 / 7.0;
            (i as u32, f, g, (next() % 2001) as i64 - 1000, bits % 5 == 0)
        })
        .collect();
    let (a, b) = (d.join("records.csv"), d.join("numbers.csv"));
    let mut w = create_writer(&a).unwrap();
    w.write_record(["frame", "f", "g", "id"]).unwrap();
    for &(fr, f, g, id, gap) in &rows {
        let id = if gap { String::new() } else { id.to_string() };
        w.write_record([fr.to_string(), f.to_string(), g.to_string(), id])
            .unwrap();
    }
    w.finish().unwrap();
    let mut w = create_writer(&b).unwrap();
    w.write_record(["frame", "f", "g", "id"]).unwrap();
    w.write_number_rows(&rows, |&(fr, f, g, id, gap), r| {
        r.num(fr);
        r.num(f);
        r.num(g);
        if gap { r.empty() } else { r.num(id) }
    })
    .unwrap();
    w.finish().unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    // one field, empty or not
    let (a, b) = (d.join("one-records.csv"), d.join("one-numbers.csv"));
    let ones: Vec<Option<u32>> = vec![Some(3), None, Some(0), None];
    let mut w = create_writer(&a).unwrap();
    for o in &ones {
        w.write_record([o.map(|v| v.to_string()).unwrap_or_default()])
            .unwrap();
    }
    w.finish().unwrap();
    let mut w = create_writer(&b).unwrap();
    w.write_number_rows(&ones, |o, r| match o {
        Some(v) => r.num(*v),
        None => r.empty(),
    })
    .unwrap();
    w.finish().unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    // another width: refused, nothing of it written
    let c = d.join("width.csv");
    let mut w = create_writer(&c).unwrap();
    w.write_record(["a", "b"]).unwrap();
    let e = w
        .write_number_rows(&[1u32, 2, 3], |&v, r| {
            r.num(v);
            if v != 2 {
                r.num(v);
            }
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("width.csv"), "{e}");
    assert!(e.contains("1 field(s), expected 2"), "{e}");
    drop(w);
    assert!(!c.exists(), "a table left unfinished leaves no file");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bom_quotes_crlf_blank_lines() {
    let t = table(
        "a.csv",
        b"\xEF\xBB\xBFframe, y ,x,note\r\n\r\n0,1.5,2,\"a, \"\"b\"\"\"\r\n   \r\n\
          1,2,3,\"two\nlines\"\r\n",
    )
    .unwrap();
    assert_eq!(t.header, ["frame", " y ", "x", "note"]);
    assert_eq!(t.column("y").unwrap(), 1);
    assert_eq!(t.rows.len(), 2);
    assert_eq!(t.field(0, 3), "a, \"b\"");
    assert_eq!((t.line(0), t.line(1)), (3, 5));
    assert_eq!(t.f64_column("y").unwrap(), [1.5, 2.0]);
    assert_eq!(t.frame(1, 0).unwrap(), 1);
}

#[test]
fn errors_name_file_line_and_column() {
    let t = table("b.csv", b"frame,y\n0,1\n\n1,oops\n1e19,2\n2.5,1\nnan,1\n").unwrap();
    let e = t.f64_column("y").unwrap_err().to_string();
    assert!(e.contains("b.csv:4: column y: \"oops\""), "{e}");
    let e = t.column("x").unwrap_err().to_string();
    assert!(e.contains("no column \"x\" (columns: frame, y)"), "{e}");
    for (r, what) in [
        (2, "out of range"),
        (3, "not an integer"),
        (4, "not finite"),
    ] {
        let e = t.frame(r, 0).unwrap_err().to_string();
        assert!(e.contains(what) && e.contains("column frame"), "{e}");
    }
    assert_eq!(t.frame(0, 0).unwrap(), 0);
    let e = table("c.csv", b"frame,y\n0,1\n1,2,3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("c.csv:3: 3 field(s), the header has 2"), "{e}");
    // old Mac line ends (lone CR), and a quoted line break inside a row
    let t = table("cr.csv", b"frame,y\r0,\"1\n\"\r\r1,x\r").unwrap();
    let e = t.f64_column("y").unwrap_err().to_string();
    assert!(e.contains("cr.csv:5: column y: \"x\""), "{e}");
    let e = table("d.csv", b"").unwrap_err().to_string();
    assert!(e.contains("empty CSV"), "{e}");
    let e = table("e.csv", b"frame,y\n0,\xff\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("e.csv:2") && e.contains("UTF-8"), "{e}");
    let e = table("dup.csv", b"y,y\n1,2\n").unwrap();
    assert!(
        e.column("y")
            .unwrap_err()
            .to_string()
            .contains("more than once")
    );
}

#[test]
fn frame_limits() {
    let t = table(
        "f.csv",
        b"frame\n9007199254740992\n-9007199254740992\n9007199254740993\n3.0\n4e0\n\
          -9223372036854775808\n",
    )
    .unwrap();
    assert_eq!(t.frame(0, 0).unwrap(), MAX_FRAME);
    assert_eq!(t.frame(1, 0).unwrap(), -MAX_FRAME);
    assert!(t.frame(2, 0).is_err());
    assert_eq!(t.frame(3, 0).unwrap(), 3);
    assert_eq!(t.frame(4, 0).unwrap(), 4);
    assert!(t.frame(5, 0).is_err());
}

#[test]
fn row_reader_reads_what_read_table_reads() {
    let d = std::env::temp_dir().join(format!("ab-io-csv-rows-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("rows.csv");
    std::fs::write(
        &p,
        b"\xEF\xBB\xBFframe, y ,x,note\r\n\r\n0,1.5,2,\"a, \"\"b\"\"\"\r\n   \r\n\
          1,2,3,\"two\nlines\"\r\n2,oops,1e19,\r\n",
    )
    .unwrap();
    let t = read_table(&p).unwrap();
    let mut rd = RowReader::open(&p).unwrap();
    assert_eq!(rd.header(), t.header);
    assert_eq!(rd.column("y").unwrap(), t.column("y").unwrap());
    assert!(rd.has_column("note") && !rd.has_column("z"));
    let mut row = ::csv::StringRecord::new();
    for r in 0..t.rows.len() {
        assert!(rd.read_row(&mut row).unwrap());
        assert_eq!(row, t.rows[r]);
        assert_eq!(RowReader::line(&row), t.line(r));
        for c in 0..3 {
            let same = |a: Result<f64>, b: Result<f64>| match (a, b) {
                (Ok(x), Ok(y)) => x.to_bits() == y.to_bits(),
                (Err(x), Err(y)) => x.to_string() == y.to_string(),
                _ => false,
            };
            assert!(same(rd.f64(&row, c), t.f64(r, c)));
            assert!(same(rd.finite_f64(&row, c), t.finite_f64(r, c)));
            let (a, b) = (rd.frame(&row, c), t.frame(r, c));
            assert_eq!(a.is_ok(), b.is_ok());
            if let (Err(a), Err(b)) = (a, b) {
                assert_eq!(a.to_string(), b.to_string());
            }
        }
    }
    assert!(!rd.read_row(&mut row).unwrap());
    // a ragged row is named by its line, as read_table names it
    std::fs::write(&p, b"frame,y\n0,1\n\n1,2,3\n").unwrap();
    let mut rd = RowReader::open(&p).unwrap();
    assert!(rd.read_row(&mut row).unwrap());
    let e = rd.read_row(&mut row).unwrap_err().to_string();
    assert_eq!(e, read_table(&p).unwrap_err().to_string());
    assert!(e.contains("rows.csv:4: 3 field(s)"), "{e}");
    std::fs::write(&p, b"").unwrap();
    let e = RowReader::open(&p).unwrap_err().to_string();
    assert!(e.contains("empty CSV"), "{e}");
}

#[test]
fn writer_round_trips_quoted_fields() {
    let d = std::env::temp_dir().join(format!("ab-io-csv-w-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("w.csv");
    let mut w = create_writer(&p).unwrap();
    w.write_record(["a", "b,c"]).unwrap();
    w.write_record(["1", "say \"hi\""]).unwrap();
    w.finish().unwrap();
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "a,\"b,c\"\n1,\"say \"\"hi\"\"\"\n"
    );
    let t = read_table(&p).unwrap();
    assert_eq!(t.header, ["a", "b,c"]);
    assert_eq!(t.field(0, 1), "say \"hi\"");
}

#[test]
fn accessors_that_return_a_result_do_not_panic_out_of_range() {
    let t = table("r.csv", b"frame,y,x\n0,1.5,2\n1,2,3\n").unwrap();
    assert_eq!(t.f64(0, 1).unwrap(), 1.5);
    for (row, col) in [(0, 99), (5, 0), (usize::MAX, usize::MAX)] {
        assert!(t.f64(row, col).is_err(), "{row} {col}");
        assert!(t.finite_f64(row, col).is_err(), "{row} {col}");
        assert!(t.frame(row, col).is_err(), "{row} {col}");
    }
}
