//! Typed kernel launchers, generated from the kernels' C prototypes.
//!
//! Each shipped kernel source (`.cl`, one text for OpenCL and CUDA) declares its kernels once,
//! as C. This script reads every `KERNEL name(...)` prototype of a source (also those written
//! by a function-like macro and its instantiations, e.g. `PRESCALE_KERNEL(prescale_u8, uchar)`)
//! and writes `$OUT_DIR/<stem>_kernels.rs`: the list of entry points and a `Kernels` type with
//! one typed launcher per kernel, in parameter order. A `GLOBAL T*` parameter becomes a device
//! buffer of `T`'s Rust type (`uint` → `u32`, `REAL` → a type parameter shared by every
//! `REAL` of the kernel, ...), a scalar becomes a value of its type, `LOCAL_ARG(T, name)` the
//! size of the local memory in elements of `T`. A kernel and its Rust call site therefore cannot
//! disagree on the number, order or types of the arguments: a mismatch does not compile.

use std::fmt::Write as _;
use std::path::Path;

/// (source file under `src/`, Rust path of its `KernelSource` from the generated module, stem).
const SOURCES: &[(&str, &str, &str)] = &[
    ("detect/kernels/blob_log.cl", "super::BLOB_LOG", "blob_log"),
    ("detect/kernels/locate.cl", "super::LOCATE", "locate"),
    ("paco/gpu_kernels/paco.cl", "super::PACO", "paco"),
];

#[derive(Debug)]
enum Kind {
    /// A `GLOBAL` pointer to elements of the C type.
    Buf(String),
    /// A scalar of the C type.
    Scalar(String),
    /// `LOCAL_ARG(T, name)`.
    Local(String),
}

#[derive(Debug)]
struct Param {
    name: String,
    kind: Kind,
}

#[derive(Debug)]
struct Kernel {
    name: String,
    prototype: String,
    params: Vec<Param>,
}

fn main() -> Result<(), String> {
    let out = std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?;
    for &(file, program, stem) in SOURCES {
        let path = Path::new("src").join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let kernels = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let code =
            generate(file, program, &kernels).map_err(|e| format!("{}: {e}", path.display()))?;
        let dest = Path::new(&out).join(format!("{stem}_kernels.rs"));
        std::fs::write(&dest, code).map_err(|e| format!("writing {}: {e}", dest.display()))?;
    }
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}

/// The text without `/* */` and `//` comments and with line continuations joined.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.replace("\\\r\n", " ").replace("\\\n", " ")
}

/// The text inside the parentheses that open at `open` (balanced), and the index after them.
fn balanced(s: &str, open: usize) -> Result<(&str, usize), String> {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Ok((&s[open + 1..open + i], open + i + 1));
                }
            }
            _ => {}
        }
    }
    Err(format!("unbalanced parentheses after {:?}", &s[..open]))
}

/// Top-level comma-separated items of `s`, trimmed.
fn split_top(s: &str) -> Vec<String> {
    let (mut items, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        items.push(cur.trim().to_string());
    }
    items
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` with each identifier in `from` replaced by the matching `to` (whole identifiers).
fn substitute(text: &str, from: &[String], to: &[String]) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match from.iter().position(|f| f == word) {
            Some(i) => out.push_str(&to[i]),
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in text.chars() {
        if is_ident_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Every kernel of the source, in source order.
fn parse(text: &str) -> Result<Vec<Kernel>, String> {
    let text = clean(text);
    // function-like macros whose body defines a kernel
    let mut macros: Vec<(String, Vec<String>, String)> = Vec::new();
    let mut body_lines = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(def) = t.strip_prefix("#define") {
            let def = def.trim_start();
            let name_end = def.find(|c: char| !is_ident_char(c)).unwrap_or(def.len());
            if def[name_end..].starts_with('(') && def.contains("KERNEL") {
                let (params, after) = balanced(def, name_end)?;
                macros.push((
                    def[..name_end].to_string(),
                    split_top(params),
                    def[after..].to_string(),
                ));
            }
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        let expanded = macros.iter().find_map(|(name, params, body)| {
            let rest = t.strip_prefix(name.as_str())?;
            rest.trim_start()
                .starts_with('(')
                .then_some((params, body, rest))
        });
        match expanded {
            Some((params, body, rest)) => {
                let open = rest.find('(').unwrap_or(0);
                let (args, _) = balanced(rest, open)?;
                body_lines.push(substitute(body, params, &split_top(args)));
            }
            None => body_lines.push(line.to_string()),
        }
    }
    let body = body_lines.join("\n");
    let mut kernels = Vec::new();
    let mut from = 0;
    while let Some(i) = body[from..].find("KERNEL") {
        let at = from + i;
        from = at + "KERNEL".len();
        let before_ok = at == 0 || !body[..at].ends_with(is_ident_char);
        let after_ok = !body[from..].starts_with(is_ident_char);
        if !(before_ok && after_ok) {
            continue;
        }
        let rest = &body[from..];
        let open = rest
            .find('(')
            .ok_or_else(|| "KERNEL without parameters".to_string())?;
        let name = rest[..open].trim().to_string();
        let (params, after) = balanced(rest, open)?;
        let params_text = params.split_whitespace().collect::<Vec<_>>().join(" ");
        kernels.push(Kernel {
            prototype: format!("KERNEL {name}({params_text})"),
            params: split_top(params)
                .iter()
                .map(|p| param(p).map_err(|e| format!("kernel {name}: {e}")))
                .collect::<Result<_, _>>()?,
            name,
        });
        from += after;
    }
    Ok(kernels)
}

/// One parameter: `GLOBAL const T* RESTRICT name`, `const uint name`, `LOCAL_ARG(T, name)`.
fn param(p: &str) -> Result<Param, String> {
    if let Some(rest) = p.strip_prefix("LOCAL_ARG") {
        let open = rest
            .find('(')
            .ok_or_else(|| format!("{p:?}: LOCAL_ARG without arguments"))?;
        let (args, _) = balanced(rest, open)?;
        let parts = split_top(args);
        let [ty, name] = parts.as_slice() else {
            return Err(format!("{p:?}: LOCAL_ARG takes (T, name)"));
        };
        return Ok(Param {
            name: name.clone(),
            kind: Kind::Local(ty.clone()),
        });
    }
    let pointer = p.contains('*');
    let words: Vec<&str> = p
        .split(|c: char| c.is_whitespace() || c == '*')
        .filter(|w| !w.is_empty() && !matches!(*w, "GLOBAL" | "const" | "RESTRICT" | "restrict"))
        .collect();
    let [ty @ .., name] = words.as_slice() else {
        return Err(format!("{p:?}: no parameter name"));
    };
    let ty = ty.join(" ");
    if ty.is_empty() {
        return Err(format!("{p:?}: no type"));
    }
    Ok(Param {
        name: (*name).to_string(),
        kind: if pointer {
            Kind::Buf(ty)
        } else {
            Kind::Scalar(ty)
        },
    })
}

/// The Rust type of a C type, and whether it is a type parameter of the launcher.
fn rust_type(c: &str) -> Result<(String, bool), String> {
    let t = match c {
        "uchar" | "unsigned char" => "u8",
        "ushort" | "unsigned short" => "u16",
        "uint" | "unsigned int" => "u32",
        "int" => "i32",
        "ulong" | "unsigned long long" => "u64",
        "long" | "long long" => "i64",
        "float" => "f32",
        "double" => "f64",
        other if other.chars().all(is_ident_char) && !other.chars().any(|c| c.is_lowercase()) => {
            return Ok((other.to_string(), true));
        }
        other => return Err(format!("no Rust type for the C type {other:?}")),
    };
    Ok((t.to_string(), false))
}

/// A Rust parameter name for a C one (keywords get a trailing underscore).
fn rust_name(c: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "as", "box", "break", "fn", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
        "move", "mut", "ref", "self", "static", "struct", "super", "trait", "type", "use", "where",
        "while",
    ];
    if KEYWORDS.contains(&c) {
        format!("{c}_")
    } else {
        c.to_string()
    }
}

fn generate(file: &str, program: &str, kernels: &[Kernel]) -> Result<String, String> {
    let mut s = String::new();
    let w = |s: &mut String, t: &str| s.push_str(t);
    w(
        &mut s,
        &format!("// Generated by crates/algorithms/build.rs from src/{file}: do not edit.\n\n"),
    );
    let local = kernels
        .iter()
        .any(|k| k.params.iter().any(|p| matches!(p.kind, Kind::Local(_))));
    let _ = writeln!(
        s,
        "use bridge_core::Result;\nuse bridge_core::exec::{{DeviceElement, DeviceSlice, Executor, \
         Grid, KernelArg, KernelScalar, {}Program}};\n",
        if local { "Local, " } else { "" }
    );
    let names: Vec<String> = kernels.iter().map(|k| format!("{:?}", k.name)).collect();
    let _ = writeln!(
        s,
        "/// The kernels of [`{program}`], in source order.\npub const ENTRY_POINTS: &[&str] = \
         &[{}];\n",
        names.join(", ")
    );
    let _ = writeln!(
        s,
        "/// Typed launchers of [`{program}`]: one per kernel, generated from its C prototype in \
         `src/{file}`.\npub struct Kernels<'a, E: Executor>(Program<'a, E>);\n\n\
         impl<E: Executor> Clone for Kernels<'_, E> {{\n    fn clone(&self) -> Self {{\n        \
         *self\n    }}\n}}\n\nimpl<E: Executor> Copy for Kernels<'_, E> {{}}\n\n\
         impl<E: Executor> std::fmt::Debug for Kernels<'_, E> {{\n    fn fmt(&self, f: &mut \
         std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        self.0.fmt(f)\n    }}\n}}\n\n\
         impl<'a, E: Executor> Kernels<'a, E> {{\n    /// The program built with `opts` on \
         `exec` (built on the first launch, then cached by the executor).\n    pub fn new(exec: \
         &'a E, opts: &'a [&'a str]) -> Self {{\n        Kernels(Program::new(exec, \
         &{program}, opts))\n    }}\n\n    /// The program.\n    pub fn program(&self) -> \
         Program<'a, E> {{\n        self.0\n    }}\n"
    );
    for k in kernels {
        launcher(&mut s, k)?;
    }
    w(&mut s, "}\n");
    Ok(s)
}

/// One launcher method.
fn launcher(s: &mut String, k: &Kernel) -> Result<(), String> {
    // type parameters: (name, used as a scalar)
    let mut generics: Vec<(String, bool)> = Vec::new();
    let mut params = Vec::new();
    let mut args = Vec::new();
    for p in &k.params {
        let name = rust_name(&p.name);
        let (cty, scalar) = match &p.kind {
            Kind::Buf(t) | Kind::Local(t) => (t, false),
            Kind::Scalar(t) => (t, true),
        };
        let (rty, generic) = rust_type(cty)?;
        if generic {
            match generics.iter_mut().find(|(g, _)| *g == rty) {
                Some(g) => g.1 |= scalar,
                None => generics.push((rty.clone(), scalar)),
            }
        }
        match &p.kind {
            Kind::Buf(_) => {
                params.push(format!("{name}: &impl DeviceSlice<E, Elem = {rty}>"));
                args.push(format!("KernelArg::Buf({name}.raw())"));
            }
            Kind::Scalar(_) => {
                if matches!(rty.as_str(), "u8" | "u16") {
                    return Err(format!(
                        "kernel {}: scalar parameter {} of a type no launch passes ({cty})",
                        k.name, p.name
                    ));
                }
                params.push(format!("{name}: {rty}"));
                args.push(format!("KernelScalar::arg({name})"));
            }
            Kind::Local(_) => {
                params.push(format!("{name}: Local<{rty}>"));
                args.push(format!("{name}.arg()"));
            }
        }
    }
    let gen_list: Vec<String> = generics
        .iter()
        .map(|(g, scalar)| {
            if *scalar {
                format!("{g}: DeviceElement + KernelScalar")
            } else {
                format!("{g}: DeviceElement")
            }
        })
        .collect();
    let generics = if gen_list.is_empty() {
        String::new()
    } else {
        format!("<{}>", gen_list.join(", "))
    };
    let _ = writeln!(
        s,
        "\n    /// Launches `{}` on `grid`:\n    ///\n    /// ```c\n    /// {}\n    /// ```\n    \
         #[allow(non_camel_case_types, clippy::too_many_arguments)]\n    pub fn {}{generics}(&self, \
         grid: Grid<'_>, {}) -> Result<()> {{\n        self.0.launch_args({:?}, grid, &[{}])\n    }}",
        k.name,
        k.prototype,
        k.name,
        params.join(", "),
        k.name,
        args.join(", ")
    );
    Ok(())
}
