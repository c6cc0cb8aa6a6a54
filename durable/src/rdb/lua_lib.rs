//! The Lua helpers the scripts share (`scripts/lib/`), parsed into functions, and the
//! closure of those a script calls (see the `scripts` module's docs).

/// The lib files, by name (`lib/reads.lua`) and text, in the order a script gets them.
macro_rules! lib_files {
    ($($file:ident),*) => {
        &[$((
            concat!("lib/", stringify!($file), ".lua"),
            include_str!(concat!("scripts/lib/", stringify!($file), ".lua")),
        ),)*]
    };
}

pub(crate) const LIB_FILES: &[(&str, &str)] =
    lib_files!(reads, acl, calls, meta, jobs, place, batch, recur, cold);

/// The lib files, cut into their functions.
pub(super) struct Lib {
    /// Name and text (ending with a newline) of each file.
    pub(super) files: &'static [(&'static str, &'static str)],
    pub(super) functions: Vec<Function>,
}

/// One `function name(...)` of a lib file: from that line to the first line after it
/// that is `end`. The files' style, which [`Lib::parse`] checks: a function's own `end`
/// is its only line at column 0, and outside functions there are only comments, blank
/// lines and `local` statements of one line.
pub(super) struct Function {
    pub(super) name: &'static str,
    /// The file it is in (an index into `Lib::files`).
    pub(super) file: usize,
    /// Its first and last line in that file, 0-based.
    pub(super) first: usize,
    pub(super) last: usize,
    /// The lib functions it names (indices into `Lib::functions`).
    pub(super) uses: Vec<usize>,
}

impl Lib {
    pub(super) fn new() -> Lib {
        Lib::parse(LIB_FILES)
    }

    /// # Panics
    ///
    /// If a file breaks the style [`Function`] states, or two functions share a name:
    /// each names the file and line.
    pub(super) fn parse(files: &'static [(&'static str, &'static str)]) -> Lib {
        let mut functions: Vec<Function> = Vec::new();
        let mut bodies = Vec::new();
        for (file, &(file_name, text)) in files.iter().enumerate() {
            assert!(text.ends_with('\n'), "{file_name}: no final newline");
            let lines: Vec<&str> = text.lines().collect();
            let mut i = 0;
            while i < lines.len() {
                let at = |l: usize| format!("{file_name}:{}", l + 1);
                let Some(rest) = lines[i].strip_prefix("function ") else {
                    let line = lines[i];
                    assert!(
                        line.is_empty() || line.starts_with("--") || line.starts_with("local "),
                        "{}: outside a function, a lib line is a comment, a blank or a \
                         one-line `local`",
                        at(i)
                    );
                    i += 1;
                    continue;
                };
                let name = rest.split('(').next().unwrap_or(rest).trim();
                let last = (i..lines.len())
                    .find(|&l| lines[l] == "end")
                    .unwrap_or_else(|| panic!("{}: function {name} has no `end` line", at(i)));
                if let Some(l) = (i + 1..last)
                    .find(|&l| lines[l].starts_with(|c: char| !c.is_whitespace() && c != '-'))
                {
                    panic!("{}: only function {name}'s own `end` is at column 0", at(l));
                }
                if let Some(other) = functions.iter().find(|f| f.name == name) {
                    let other = files[other.file].0;
                    panic!("{}: function {name} is in {other} already", at(i));
                }
                functions.push(Function {
                    name,
                    file,
                    first: i,
                    last,
                    uses: Vec::new(),
                });
                bodies.push(lines[i..=last].join("\n"));
                i = last + 1;
            }
        }
        let mut lib = Lib { files, functions };
        let uses: Vec<Vec<usize>> = bodies.iter().map(|body| lib.named_in(body)).collect();
        for (f, uses) in lib.functions.iter_mut().zip(uses) {
            f.uses = uses;
        }
        lib
    }

    /// The lib functions that `code` names (outside comments and strings), in the
    /// files' order.
    pub(super) fn named_in(&self, code: &str) -> Vec<usize> {
        let names = identifiers(code);
        (0..self.functions.len())
            .filter(|&i| names.contains(self.functions[i].name))
            .collect()
    }

    /// Whether each function is needed by `script`: named by it, or by a needed function.
    pub(super) fn closure(&self, script: &str) -> Vec<bool> {
        let mut needed = vec![false; self.functions.len()];
        let mut todo = self.named_in(script);
        while let Some(f) = todo.pop() {
            if !needed[f] {
                needed[f] = true;
                todo.extend(&self.functions[f].uses);
            }
        }
        needed
    }

    /// `local a, b, ...` for the needed functions (nothing if none is).
    pub(super) fn declare(&self, needed: &[bool]) -> String {
        let names: Vec<&str> = self
            .functions
            .iter()
            .zip(needed)
            .filter(|(_, &n)| n)
            .map(|(f, _)| f.name)
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!("local {}", names.join(", "))
        }
    }

    /// Marks lib function `name` needed.
    pub(super) fn need(&self, name: &str, needed: &mut [bool]) {
        let f = self.functions.iter().position(|f| f.name == name);
        needed[f.unwrap_or_else(|| panic!("no lib file has function {name}"))] = true;
    }

    /// The files that hold a needed function, by name, each with the lines of the
    /// functions not needed left empty (so every line keeps its number).
    pub(super) fn text_of(&self, needed: &[bool]) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (file, &(name, text)) in self.files.iter().enumerate() {
            let mut kept = false;
            let mut lines: Vec<&str> = text.split('\n').collect();
            for (f, &n) in self.functions.iter().zip(needed) {
                if f.file != file {
                    continue;
                }
                kept |= n;
                if !n {
                    for line in &mut lines[f.first..=f.last] {
                        *line = "";
                    }
                }
            }
            if kept {
                out.push((name, lines.join("\n")));
            }
        }
        out
    }
}

/// The identifiers in Lua `code`, outside comments (`--` to the end of the line: the lib
/// and the scripts use no block comments) and quoted strings.
pub(super) fn identifiers(code: &str) -> std::collections::HashSet<&str> {
    let mut out = std::collections::HashSet::new();
    for line in code.lines() {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'-' && bytes.get(i + 1) == Some(&b'-') {
                break;
            } else if c == b'\'' || c == b'"' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if c.is_ascii_digit() {
                // A number (`1e5`, `0x10`): no identifier inside.
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                // A field (`b.order`, `string.format`) is not a variable; after `..`
                // (concatenation) it is.
                let field = start > 0
                    && bytes[start - 1] == b'.'
                    && (start < 2 || bytes[start - 2] != b'.');
                if !field {
                    out.insert(&line[start..i]);
                }
            } else {
                i += 1;
            }
        }
    }
    out
}
