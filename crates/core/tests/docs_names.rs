//! `docs/core-api.md` stays true to the code.
//!
//! The page is a list of sections headed `` ## `module` `` (a module path of this crate,
//! `engine::checker` for a nested one), each holding declarations as the code spells
//! them: `pub fn name(...)`, `pub struct Name`, `pub trait Name`, `fn method(...)` in a
//! trait, `impl Trait for Type`. This test reads the page and asserts, for every section,
//! that the module exists (`pub mod` in its parent) and that each declaration the section
//! cites is declared in that module's source files (the module's file and everything
//! under its directory), and that an enum written with its braces (`pub enum E { A, B }`)
//! lists exactly the variants the code declares: a renamed, moved or removed item, or a
//! variant added or dropped, fails here, naming the line. It reads only files of the
//! repository.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Keywords after `pub` that declare an item this test checks.
const KINDS: &[&str] = &["fn", "struct", "enum", "trait", "const", "type", "mod"];

/// The words of a line without its `//` comment, in order: everything that is not
/// `[A-Za-z0-9_]` separates words.
fn words(line: &str) -> Vec<&str> {
    let code = match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    };
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// What a run of words declares: `(kind, name, public)` for `[pub] [async|unsafe|const]
/// KIND NAME`, and `("impl", Trait, false)` for `impl ... Trait for`.
fn declarations(words: &[&str]) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for (i, &w) in words.iter().enumerate() {
        let next = words.get(i + 1).copied();
        if w == "for" && i > 0 && words[..i].contains(&"impl") {
            out.push(("impl".to_string(), words[i - 1].to_string(), false));
            continue;
        }
        // `pub const fn f` declares a function, not a constant named `fn`.
        if !KINDS.contains(&w) || (w == "const" && next == Some("fn")) {
            continue;
        }
        let Some(name) = next else { continue };
        // `pub async fn`, `pub const fn`, `pub unsafe fn`: `pub` before the modifiers.
        let mut k = i;
        while k > 0 && matches!(words[k - 1], "async" | "unsafe" | "const") {
            k -= 1;
        }
        let public = k > 0 && words[k - 1] == "pub";
        out.push((w.to_string(), name.to_string(), public));
    }
    out
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source files of module `path` (`["engine", "checker"]`): its own file and every
/// file below its directory (submodules, `pub use`d items). Unit-test files excluded.
fn module_files(src: &Path, path: &[&str]) -> Vec<PathBuf> {
    let mut dir = src.to_path_buf();
    for p in path {
        dir.push(p);
    }
    let mut files = Vec::new();
    let own = dir.with_extension("rs");
    if own.is_file() {
        files.push(own);
    }
    rs_files(&dir, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    files
}

/// `(kind, name)` of what a module declares.
type Declared = HashSet<(String, String)>;

/// Everything `files` declare: `(kind, name)` for public items, `("fn", name)` for every
/// function (trait methods carry no `pub`), `("impl", Trait)` for trait impls.
fn declared(files: &[PathBuf]) -> Declared {
    let mut set = HashSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            for (kind, name, public) in declarations(&words(line)) {
                if public || kind == "fn" || kind == "impl" {
                    set.insert((kind, name));
                }
            }
        }
    }
    set
}

/// The text inside the braces that open in `text` at or after `from`, balanced across
/// lines, without `/* */` comments; `None` if they do not close.
fn braced(text: &str, from: usize) -> Option<String> {
    let open = from + text[from..].find('{')?;
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let mut inner = text[open + 1..open + i].to_string();
                    while let Some(s) = inner.find("/*") {
                        let e = inner[s..].find("*/").map_or(inner.len(), |e| s + e + 2);
                        inner.replace_range(s..e, " ");
                    }
                    return Some(inner);
                }
            }
            _ => {}
        }
    }
    None
}

/// The variants of an enum body as the page writes it (`A, B { x }, C(String)`): the
/// first word of each part between top-level commas.
fn doc_variants(body: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0;
    for c in body.chars() {
        match c {
            '{' | '(' => depth += 1,
            '}' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        parts.last_mut().unwrap().push(c);
    }
    parts
        .iter()
        .filter_map(|p| words(p).first().map(|w| w.to_string()))
        .collect()
}

/// The variants of `pub enum name` in `files` as the code declares them (rustfmt: one
/// per line, at depth one, capitalised), or `None` if no file declares it.
fn code_variants(files: &[PathBuf], name: &str) -> Option<Vec<String>> {
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let Some(at) = text
            .lines()
            .scan(0, |pos, l| {
                let start = *pos;
                *pos += l.len() + 1;
                Some((start, l))
            })
            .find(|(_, l)| words(l).windows(3).any(|w| w == ["pub", "enum", name]))
            .map(|(start, _)| start)
        else {
            continue;
        };
        let body = &text[at + text[at..].find('{')? + 1..];
        let (mut depth, mut variants) = (1, Vec::new());
        for line in body.lines() {
            let trimmed = line.trim_start();
            if depth == 1 && trimmed.starts_with(|c: char| c.is_ascii_uppercase()) {
                variants.push(words(trimmed)[0].to_string());
            }
            let code = line.find("//").map_or(line, |i| &line[..i]);
            depth += code.matches(['{', '(']).count() as i32;
            depth -= code.matches(['}', ')']).count() as i32;
            if depth <= 0 {
                return Some(variants);
            }
        }
    }
    None
}

#[test]
fn every_name_core_api_md_cites_is_declared_in_its_module() {
    // At run time: the binary may come from a build in another clone.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let crate_dir = Path::new(&manifest);
    let src = crate_dir.join("src");
    let doc_path = crate_dir.join("../../docs/core-api.md");
    let doc = std::fs::read_to_string(&doc_path)
        .unwrap_or_else(|e| panic!("{}: {e}", doc_path.display()));

    // The section being read: the module's path, what it declares, its files.
    let mut module: Option<(String, Declared, Vec<PathBuf>)> = None;
    let mut sections = 0;
    let mut checked = 0;
    let mut stale = Vec::new();
    let mut offset = 0;
    for (n, line) in doc.lines().enumerate() {
        let (n, line_start) = (n + 1, offset);
        offset += line.len() + 1;
        if let Some(heading) = line.strip_prefix("## ") {
            // `## `module` ...` opens a module's section; any other heading ends it.
            module = None;
            let Some(rest) = heading.strip_prefix('`') else {
                continue;
            };
            let name = &rest[..rest.find('`').expect("closing backtick")];
            let path: Vec<&str> = name.split("::").collect();
            let (parent, last) = path.split_at(path.len() - 1);
            let parent_files = if parent.is_empty() {
                vec![src.join("lib.rs")]
            } else {
                module_files(&src, parent)
            };
            if !declared(&parent_files).contains(&("mod".into(), last[0].to_string())) {
                stale.push(format!("line {n}: no `pub mod {}` for `{name}`", last[0]));
                continue;
            }
            let files = module_files(&src, &path);
            assert!(!files.is_empty(), "line {n}: no source files for `{name}`");
            sections += 1;
            module = Some((name.to_string(), declared(&files), files));
            continue;
        }
        let Some((name, decls, files)) = &module else {
            continue;
        };
        // An enum listed with its braces lists every variant the code has, no other.
        let w = words(line);
        if let Some(&enum_name) = w
            .windows(2)
            .position(|p| p == ["pub", "enum"])
            .and_then(|i| w.get(i + 2))
        {
            let code = line.find("//").map_or(line, |c| &line[..c]);
            if code.contains('{') {
                let doc_body = braced(&doc, line_start).expect("enum braces close");
                let listed = doc_variants(&doc_body);
                match code_variants(files, enum_name) {
                    Some(have) if have == listed => {}
                    Some(have) => stale.push(format!(
                        "line {n}: `{enum_name}` lists {listed:?}, the code has {have:?}"
                    )),
                    None => {} // reported below as an undeclared `pub enum`
                }
            }
        }
        for (kind, item, public) in declarations(&words(line)) {
            // `pub` items must be declared `pub`; a bare `fn` (a trait's method) any way.
            if kind != "fn" && kind != "impl" && !public {
                continue;
            }
            checked += 1;
            if !decls.contains(&(kind.clone(), item.clone())) {
                let what = if kind == "impl" {
                    format!("impl {item} for")
                } else if public {
                    format!("pub {kind} {item}")
                } else {
                    format!("fn {item}")
                };
                stale.push(format!("line {n}: `{what}` is not declared in `{name}`"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "docs/core-api.md cites names the code does not have:\n  {}",
        stale.join("\n  ")
    );
    // The page's shape is what this test reads: if it stops finding sections and
    // declarations, it checks nothing, which must fail too.
    assert!(sections >= 12, "only {sections} module sections found");
    assert!(checked >= 100, "only {checked} declarations checked");
}

#[test]
fn the_check_sees_declarations_as_the_page_and_the_code_spell_them() {
    let d = |s: &str| declarations(&words(s));
    assert_eq!(
        d("    pub async fn read_hashes<S: LogStorage>(storage: &S) -> Hash;"),
        vec![("fn".into(), "read_hashes".into(), true)]
    );
    assert_eq!(
        d("pub fn from_skey(s: &str) -> Result<Self>; pub fn name(&self) -> &str;"),
        vec![
            ("fn".into(), "from_skey".into(), true),
            ("fn".into(), "name".into(), true)
        ]
    );
    assert_eq!(
        d("    fn name(&self) -> &str; // pub fn commented_out()"),
        vec![("fn".into(), "name".into(), false)]
    );
    assert_eq!(
        d("impl<S: LogStorage> ConsistencyProver for StorageProver<'_, S> {"),
        vec![("impl".into(), "ConsistencyProver".into(), false)]
    );
    assert_eq!(
        d("#[non_exhaustive] pub enum SignatureAlgorithm { Ed25519 }"),
        vec![("enum".into(), "SignatureAlgorithm".into(), true)]
    );
    assert_eq!(
        d("pub const HASH_SIZE: usize = 32;"),
        vec![("const".into(), "HASH_SIZE".into(), true)]
    );
}
