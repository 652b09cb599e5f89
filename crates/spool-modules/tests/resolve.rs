//! The checker on small crates written for each case: what makes an edge, what does not,
//! and what it prints.

use std::path::Path;

use spool_modules::{Crate, Cycle};

/// Writes `files` (path, text) under a new crate directory and loads it.
fn krate(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("fixture");
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
        std::fs::write(path, text).expect("write");
    }
    std::fs::write(root.join("Cargo.toml"), "").expect("write");
    let loaded = Crate::load(&root).expect("the fixture loads");
    (dir, loaded)
}

fn shown(cycles: &[Cycle]) -> String {
    cycles.iter().map(ToString::to_string).collect()
}

#[test]
fn two_siblings_that_import_each_other_are_a_cycle_with_the_uses_that_make_it() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A(B);\n"),
        ("src/b.rs", "pub struct B;\nfn f(_: crate::a::A) {}\n"),
    ]);
    assert_eq!(
        shown(&k.sibling_cycles()),
        "fixture: a cycle among the children of crate: a, b\n\
         \x20 a -> b:\n\
         \x20   fixture/src/a.rs:1 crate::b::B\n\
         \x20   fixture/src/a.rs:2 B\n\
         \x20 b -> a:\n\
         \x20   fixture/src/b.rs:2 crate::a::A\n"
    );
}

#[test]
fn a_re_export_at_the_root_does_not_hide_the_defining_module() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\npub use a::A;\n"),
        ("src/a.rs", "pub struct A;\nfn f() { crate::b::g() }\n"),
        ("src/b.rs", "use crate::A;\npub fn g() { let _ = A; }\n"),
    ]);
    let cycles = k.sibling_cycles();
    assert_eq!(cycles.len(), 1, "{}", shown(&cycles));
    assert_eq!(cycles[0].members, ["a", "b"]);
    let imports: Vec<String> = k.root_imports().iter().map(ToString::to_string).collect();
    assert_eq!(
        imports,
        ["fixture/src/b.rs:1: `crate::A` goes through the crate root; it is defined in crate::a"]
    );
}

#[test]
fn a_chain_through_a_third_module_is_one_cycle_of_three() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("src/a.rs", "pub struct A(crate::b::B);\n"),
        ("src/b.rs", "pub struct B(crate::c::C);\n"),
        ("src/c.rs", "pub struct C(Box<crate::a::A>, crate::d::D);\n"),
        ("src/d.rs", "pub struct D;\n"),
    ]);
    let cycles = k.sibling_cycles();
    assert_eq!(cycles.len(), 1, "{}", shown(&cycles));
    assert_eq!(cycles[0].members, ["a", "b", "c"]);
}

#[test]
fn a_parent_and_its_children_reaching_each_other_is_no_cycle() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod p;\n"),
        (
            "src/p/mod.rs",
            "mod c;\nmod e;\nuse c::C;\npub struct P(C);\n",
        ),
        (
            "src/p/c.rs",
            "use super::P;\npub struct C;\nimpl C { fn p(&self) -> Option<P> { None } }\n",
        ),
        ("src/p/e.rs", "pub fn e() -> super::c::C { super::c::C }\n"),
    ]);
    assert_eq!(shown(&k.sibling_cycles()), "");
}

#[test]
fn siblings_deeper_down_are_checked_under_their_own_parent() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod p;\n"),
        ("src/p/mod.rs", "mod x;\nmod y;\n"),
        ("src/p/x.rs", "pub fn x() { super::y::y() }\n"),
        ("src/p/y.rs", "use super::x::x;\npub fn y() { x() }\n"),
    ]);
    let cycles = k.sibling_cycles();
    assert_eq!(cycles.len(), 1, "{}", shown(&cycles));
    assert_eq!(cycles[0].parent, "crate::p");
    assert_eq!(cycles[0].members, ["x", "y"]);
}

#[test]
fn test_only_code_makes_no_edge() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n\
             #[cfg(test)]\nfn helper() -> crate::b::B { crate::b::B }\n",
        ),
        ("src/b.rs", "pub struct B(crate::a::A);\n"),
    ]);
    assert_eq!(shown(&k.sibling_cycles()), "");
}

#[test]
fn paths_inside_macro_calls_and_glob_imports_count() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        (
            "src/a.rs",
            "pub fn a() { println!(\"{:?}\", crate::b::B); }\n",
        ),
        (
            "src/b.rs",
            "#[derive(Debug)]\npub struct B;\nfn f() { crate::a::a() }\n",
        ),
        ("src/c.rs", "use crate::d::*;\npub struct C(D);\n"),
        ("src/d.rs", "pub struct D;\nfn f(_: crate::c::C) {}\n"),
    ]);
    let cycles = k.sibling_cycles();
    let members: Vec<&[String]> = cycles.iter().map(|c| c.members.as_slice()).collect();
    assert_eq!(members, [["a", "b"], ["c", "d"]], "{}", shown(&cycles));
}

#[test]
fn a_macro_rules_macro_is_found_where_it_is_defined() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "#[macro_use]\nmod out;\nmod a;\n"),
        (
            "src/out.rs",
            "macro_rules! say { ($e:expr) => { $crate::a::shout($e) } }\n",
        ),
        (
            "src/a.rs",
            "pub fn shout(_: &str) {}\nfn f() { say!(\"hi\") }\n",
        ),
    ]);
    let cycles = k.sibling_cycles();
    assert_eq!(cycles.len(), 1, "{}", shown(&cycles));
    assert_eq!(cycles[0].members, ["a", "out"]);
}

#[test]
fn a_missing_module_file_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir_all(dir.path().join("src")).expect("dirs");
    std::fs::write(dir.path().join("src/lib.rs"), "mod gone;\n").expect("write");
    let error = Crate::load(dir.path()).expect_err("no gone.rs");
    let text = error.to_string();
    assert!(
        text.contains("`mod gone;` has no file")
            && text.contains(&format!("{}", Path::new("src").join("gone.rs").display())),
        "{text}"
    );
}

#[test]
fn the_edges_under_one_parent_are_listed_with_their_uses() {
    let (_dir, k) = krate(&[
        ("src/lib.rs", "mod p;\n"),
        ("src/p/mod.rs", "mod x;\nmod y;\nmod z;\n"),
        (
            "src/p/x.rs",
            "pub fn x() { super::y::y(); super::z::Z::new(); }\n",
        ),
        ("src/p/y.rs", "use super::z::Z;\npub fn y() -> Z { Z }\n"),
        (
            "src/p/z.rs",
            "pub struct Z;\nimpl Z { pub fn new() -> Z { Z } }\n",
        ),
    ]);
    let edges: Vec<(String, String, Vec<String>)> = k
        .sibling_edges("crate::p")
        .expect("crate::p is there")
        .into_iter()
        .map(|e| (e.from, e.to, e.because))
        .collect();
    let at = |file: &str, line: u32, path: &str| format!("fixture/src/p/{file}:{line} {path}");
    assert_eq!(
        edges,
        [
            ("x".into(), "y".into(), vec![at("x.rs", 1, "super::y::y")]),
            (
                "x".into(),
                "z".into(),
                vec![at("x.rs", 1, "super::z::Z::new")]
            ),
            (
                "y".into(),
                "z".into(),
                vec![at("y.rs", 1, "super::z::Z"), at("y.rs", 2, "Z")]
            ),
        ]
    );
    assert!(k.sibling_cycles().is_empty());
    assert_eq!(k.sibling_edges("crate::q"), None);
}
