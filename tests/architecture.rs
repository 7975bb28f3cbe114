//! The shape ARCHITECTURE.md draws, held over the source itself: no import
//! cycle between the files of `src/`, the sender's rules below its storage
//! and its dispatcher, and `src/verify` on nothing else in the crate.
//!
//! A file depends on another when it names a path into it: a `use`, or a
//! `crate::`, `$crate::`, `super::` or `self::` path in its code (comments
//! and its `#[cfg(test)] mod tests` left out). Naming the crate root alone
//! (`crate::Something` re-exported there) is no dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path below the crate root: `["sender", "rules", "attempt"]`.
type Module = Vec<String>;

type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// Every file of `dir` as its module and its code (comments and unit tests
/// left out).
fn read_modules(dir: &Path) -> BTreeMap<Module, String> {
    let mut modules = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let relative = path.strip_prefix(dir).expect("below the root");
            let mut module: Module = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            // A file of unit tests is no part of the layering.
            if module.last().is_some_and(|name| name == "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            modules.insert(module, code(&text));
        }
    }
    modules
}

/// `text` without line comments and without its trailing unit tests.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `code` names: each `use` tree expanded, and every path that
/// starts at `crate`, `$crate`, `super` or `self`.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = after.find(';') else { break };
        // The tree without spaces and without its `as` renames.
        let mut tree = String::new();
        let mut tokens = after[..end].split_whitespace();
        while let Some(token) = tokens.next() {
            if token == "as" {
                let alias = tokens.next().unwrap_or_default();
                tree.extend(
                    alias
                        .chars()
                        .filter(|c| !(c.is_alphanumeric() || *c == '_')),
                );
                continue;
            }
            tree.push_str(token);
        }
        expand(&tree, &mut paths);
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(segments(&path));
        }
    }
    paths
}

/// Expands a `use` tree (no spaces) into its paths.
fn expand(tree: &str, paths: &mut Vec<Vec<String>>) {
    let Some(open) = tree.find('{') else {
        paths.push(segments(tree));
        return;
    };
    let mut depth = 0;
    let mut close = tree.len();
    for (at, c) in tree.char_indices().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = at;
                    break;
                }
            }
            _ => {}
        }
    }
    let prefix = &tree[..open];
    let inner = &tree[open + 1..close];
    let mut depth = 0;
    let mut item = String::new();
    for c in inner.chars().chain([',']) {
        match c {
            ',' if depth == 0 => {
                if !item.is_empty() {
                    expand(&format!("{prefix}{item}"), paths);
                }
                item.clear();
                continue;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        item.push(c);
    }
}

fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches('$')
        .split("::")
        .filter(|segment| !segment.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The module of `modules` that `path`, named in `from`, leads into: the
/// longest known prefix. `None` for paths outside the crate.
fn resolve(from: &Module, path: &[String], modules: &BTreeMap<Module, String>) -> Option<Module> {
    let (mut base, mut rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (from.clone(), &path[1..]),
        Some("super") => (from.clone(), path),
        _ => return None,
    };
    while rest.first().is_some_and(|segment| segment == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|segment| *segment != "self").cloned());
    (0..=base.len())
        .rev()
        .map(|length| base[..length].to_vec())
        .find(|candidate| modules.contains_key(candidate))
}

/// Which modules each module depends on.
fn dependencies(modules: &BTreeMap<Module, String>) -> Graph {
    modules
        .iter()
        .map(|(module, code)| {
            let targets = named_paths(code)
                .iter()
                .filter_map(|path| resolve(module, path, modules))
                .filter(|target| target != module && !target.is_empty())
                .collect();
            (module.clone(), targets)
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<Module>> {
    struct Search<'a> {
        graph: &'a Graph,
        next: usize,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, module: &'a Module) {
            self.index.insert(module, self.next);
            self.low.insert(module, self.next);
            self.next += 1;
            self.stack.push(module);
            for target in self.graph.get(module).into_iter().flatten() {
                if !self.index.contains_key(target) {
                    self.visit(target);
                    let low = self.low[module].min(self.low[target]);
                    self.low.insert(module, low);
                } else if self.stack.contains(&target) {
                    let low = self.low[module].min(self.index[target]);
                    self.low.insert(module, low);
                }
            }
            if self.low[module] == self.index[module] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    component.push(member.clone());
                    if member == module {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        graph,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for module in graph.keys() {
        if !search.index.contains_key(module) {
            search.visit(module);
        }
    }
    search.found
}

fn source() -> Graph {
    dependencies(&read_modules(&package_root().join("src")))
}

/// The package's folder as cargo names it to this run; the path compiled
/// in may be another checkout's, where a build cache is shared between
/// checkouts and this binary was found fresh.
fn package_root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}

fn name(module: &Module) -> String {
    module.join("/")
}

fn module(path: &str) -> Module {
    path.split('/').map(str::to_owned).collect()
}

#[test]
fn no_file_of_src_takes_part_in_an_import_cycle() {
    let graph = source();
    assert!(graph.len() > 100, "read {} modules", graph.len());
    let cycles: Vec<Vec<String>> = cycles(&graph)
        .iter()
        .map(|cycle| cycle.iter().map(name).collect())
        .collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

#[test]
fn the_sender_rules_import_nothing_from_storage_the_dispatcher_or_the_transport() {
    let graph = source();
    let rules = module("sender/rules");
    let mut checked = 0;
    for (from, targets) in &graph {
        if !from.starts_with(&rules) {
            continue;
        }
        checked += 1;
        for target in targets {
            assert!(
                target.starts_with(&rules) || target.starts_with(&module("verify")),
                "{} imports {}: the rules import only each other and `verify`",
                name(from),
                name(target)
            );
        }
    }
    assert!(checked >= 8, "found {checked} files of the rules");
}

#[test]
fn verify_depends_on_nothing_else_in_the_crate() {
    let graph = source();
    let verify = module("verify");
    for (from, targets) in graph.iter().filter(|(from, _)| from.starts_with(&verify)) {
        for target in targets {
            assert!(
                target.starts_with(&verify),
                "{} imports {}",
                name(from),
                name(target)
            );
        }
    }
}

/// The checks above find what they look for: a cycle through `use`
/// trees, `super::` and `$crate::` paths, and nothing in comments.
#[test]
fn the_layering_check_finds_a_cycle_and_ignores_comments() {
    let mut modules = BTreeMap::new();
    modules.insert(Vec::new(), String::new());
    modules.insert(
        module("a"),
        code("use crate::{b::{self, Thing as Other}, c as _};\n"),
    );
    modules.insert(module("b"), code("fn f() { super::a::g() }\n"));
    modules.insert(
        module("c"),
        code("// use crate::a;\n/// [`a`](crate::a)\nmacro_rules! m { () => { $crate::d::X } }\n"),
    );
    modules.insert(
        module("d"),
        code("#[cfg(test)]\nmod tests { use crate::c; }\n"),
    );
    let graph = dependencies(&modules);
    assert_eq!(
        graph[&module("a")],
        BTreeSet::from([module("b"), module("c")])
    );
    assert_eq!(graph[&module("c")], BTreeSet::from([module("d")]));
    assert!(graph[&module("d")].is_empty());
    assert_eq!(cycles(&graph), vec![vec![module("a"), module("b")]]);
}
