//! The workspace's own crates: no cycle among sibling modules in any of them, and
//! spool-core's files import each name from the module that defines it.

use std::path::PathBuf;

use spool_modules::{Crate, workspace_crates};

fn crates_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn no_crate_has_a_cycle_among_sibling_modules() {
    let dir = crates_dir();
    let names = workspace_crates(&dir).expect("crates/ lists");
    assert!(names.len() >= 8, "{names:?}");
    let mut found = String::new();
    for name in names {
        let krate = Crate::load(&dir.join(&name)).expect("the crate's sources load");
        for cycle in krate.sibling_cycles() {
            found.push_str(&cycle.to_string());
        }
    }
    assert!(found.is_empty(), "cycles among sibling modules:\n{found}");
}

#[test]
fn spool_core_imports_each_name_from_the_module_that_defines_it() {
    let krate = Crate::load(&crates_dir().join("spool-core")).expect("spool-core loads");
    let found: Vec<String> = krate
        .root_imports()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        found.is_empty(),
        "imports through the crate root:\n{}",
        found.join("\n")
    );
}
