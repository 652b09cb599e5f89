//! What a submission's links are: the tasks a new task waits for, the out-of-line part
//! of its entry, and, for a batch, the order its entries depend on each other in and
//! whether they form a cycle.

use crate::fingerprint::Fingerprint;
use crate::id::TaskId;
use crate::task::Family;
use crate::task::{AgentTask, Dep, Extra, NewTask};
use crate::time::Time;

/// The body a rejected task is stored with; never polled.
pub(super) struct Rejected;

impl AgentTask for Rejected {
    fn poll(&mut self, _cx: &mut crate::task::TaskContext<'_>) -> crate::task::Step {
        crate::task::Step::fail("a rejected task is never polled")
    }
}

/// The tasks a new task waits for: its parent, if submitted under one, then its
/// dependencies, a batch entry's by the id `batch` gives it. A batch entry that is not
/// there (a spawned child naming `Dep::Batch`, which only `submit_all` gives meaning to)
/// stands as task 0, which never exists.
pub(super) fn dependency_ids(extra: &Extra, batch: &[TaskId]) -> Vec<TaskId> {
    extra
        .parent
        .into_iter()
        .chain(extra.deps.iter().map(|dep| match *dep {
            Dep::Task(id) => id,
            Dep::Batch(index) => batch.get(index).copied().unwrap_or(TaskId(0)),
        }))
        .collect()
}

/// The out-of-line part of a new task's entry, for a task that needs it: one spawned,
/// below the top (`depth`), retried, with a `deadline`, a key or dependencies. Most
/// tasks have none of these and get `None`.
pub(super) fn family_of(
    spawner: Option<(TaskId, u32)>,
    depth: u32,
    extra: &Extra,
    deadline: Option<Time>,
    has_deps: bool,
) -> Option<Box<Family>> {
    let retries = extra.iteration.saturating_sub(1);
    let cold = spawner.is_some()
        || depth > 0
        || retries > 0
        || deadline.is_some()
        || extra.key.is_some()
        || has_deps;
    cold.then(|| {
        Box::new(Family {
            parent: spawner,
            depth,
            retries,
            deadline,
            key: extra.key.clone(),
            ..Family::default()
        })
    })
}

/// The batch entries each task depends on.
fn batch_deps(task: &NewTask) -> impl Iterator<Item = usize> + '_ {
    task.extra.iter().flat_map(|e| {
        e.deps.iter().filter_map(|d| match d {
            Dep::Batch(index) => Some(*index),
            Dep::Task(_) => None,
        })
    })
}

/// A cycle among the batch's dependencies, as entries each depending on the next.
pub(super) fn find_cycle(tasks: &[NewTask]) -> Option<Vec<usize>> {
    // 0: not seen, 1: on the current path, 2: done.
    let mut mark = vec![0u8; tasks.len()];
    for start in 0..tasks.len() {
        if mark[start] != 0 {
            continue;
        }
        // Iterative depth-first search with an explicit path.
        let mut path: Vec<(usize, Vec<usize>)> = Vec::new();
        mark[start] = 1;
        path.push((start, batch_deps(&tasks[start]).collect()));
        while let Some((node, next)) = path.last_mut() {
            let node = *node;
            match next.pop() {
                Some(dep) if dep < tasks.len() => match mark[dep] {
                    0 => {
                        mark[dep] = 1;
                        let deps = batch_deps(&tasks[dep]).collect();
                        path.push((dep, deps));
                    }
                    1 => {
                        let from = path.iter().position(|(n, _)| *n == dep).unwrap_or(0);
                        return Some(path[from..].iter().map(|(n, _)| *n).collect());
                    }
                    _ => {}
                },
                Some(_) => {}
                None => {
                    mark[node] = 2;
                    path.pop();
                }
            }
        }
    }
    None
}

/// The batch in an order where every entry comes after the entries it depends on:
/// the lowest index first among those free to go. The batch has no cycle.
pub(super) fn dependency_order(tasks: &[NewTask]) -> Vec<usize> {
    let n = tasks.len();
    let mut waiting_on = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, task) in tasks.iter().enumerate() {
        for dep in batch_deps(task) {
            waiting_on[i] += 1;
            dependents[dep].push(i);
        }
    }
    let mut free: std::collections::BTreeSet<usize> =
        (0..n).filter(|i| waiting_on[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = free.pop_first() {
        order.push(i);
        for d in &dependents[i] {
            waiting_on[*d] -= 1;
            if waiting_on[*d] == 0 {
                free.insert(*d);
            }
        }
    }
    order
}

/// The fingerprints of `tasks`, one per task, if any has one.
pub(super) fn fingerprints_of(tasks: &[NewTask]) -> Option<Vec<Option<Fingerprint>>> {
    let list: Vec<Option<Fingerprint>> = tasks
        .iter()
        .map(|t| t.extra.as_ref().and_then(|e| e.fingerprint))
        .collect();
    list.iter().any(Option::is_some).then_some(list)
}
