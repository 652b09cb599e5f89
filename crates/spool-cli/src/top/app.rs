//! The dashboard's modes and keys: the task list (move, filter, sort), a task's detail,
//! the cancel confirmation and the help. Pure: a key changes the [`App`] and may give
//! a [`Command`] for the client; the screen is drawn from the `App` alone.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::model::{Detail, Model, short_id};

/// What the screen shows over the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The task list.
    List,
    /// Typing a filter.
    Filter,
    /// One task's detail.
    Detail(u64),
    /// Asking whether to cancel a task (and where to go back to).
    ConfirmCancel { id: u64, from_detail: bool },
    /// The keys, over the list or over a task's detail (`Some(id)`), where it goes back to.
    Help(Option<u64>),
}

/// How the task list is sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sort {
    /// The policy's order, as the server sends the rows (it asks the policy).
    Policy,
    /// Longest in its state first.
    Waited,
    /// By agent, then the policy's order.
    Agent,
    /// By state, then the policy's order.
    State,
    /// By id.
    Id,
}

impl Sort {
    /// The next sort `s` gives.
    fn next(self) -> Sort {
        match self {
            Sort::Policy => Sort::Waited,
            Sort::Waited => Sort::Agent,
            Sort::Agent => Sort::State,
            Sort::State => Sort::Id,
            Sort::Id => Sort::Policy,
        }
    }

    /// Its name on the screen.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sort::Policy => "policy",
            Sort::Waited => "waited",
            Sort::Agent => "agent",
            Sort::State => "state",
            Sort::Id => "id",
        }
    }
}

/// What a key asks of the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Read task `id` and follow its events (`None`: stop).
    Watch(Option<u64>),
    /// Cancel task `id`.
    Cancel(u64),
    /// Read the queue of shard `n` (a cluster node answers it per shard).
    Shard(u32),
}

/// What the main loop does after a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Draw again.
    Redraw,
    /// Tell the client, then draw again.
    Send(Command),
    /// Leave.
    Quit,
}

/// The dashboard: the model and what the person is doing with it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct App {
    pub(crate) model: Model,
    pub(crate) mode: Mode,
    /// The filter applied (and being typed, in [`Mode::Filter`]).
    pub(crate) filter: String,
    pub(crate) sort: Sort,
    /// The selected task's id (kept across refreshes, rather than its row).
    pub(crate) selected: Option<u64>,
    /// The shard whose queue is asked for on a cluster node (`[` and `]` change it).
    pub(crate) shard: u32,
}

impl App {
    /// A dashboard over `model`.
    pub(crate) fn new(model: Model) -> App {
        App {
            model,
            mode: Mode::List,
            filter: String::new(),
            sort: Sort::Policy,
            selected: None,
            shard: 0,
        }
    }

    /// The live tasks the list shows: filtered, sorted.
    pub(crate) fn rows(&self) -> Vec<&Detail> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&Detail> = self
            .model
            .queue
            .details
            .iter()
            .filter(|d| {
                needle.is_empty()
                    || matches(d, &needle)
                    || (self.model.cluster.is_some() && short_id(d.id) == needle)
            })
            .collect();
        // The server sends the rows in the policy's order (it asks the policy, which
        // alone knows it): kept as they come, and the ties of the other sorts keep it
        // (the sorts are stable).
        match self.sort {
            Sort::Policy => {}
            Sort::Waited => rows.sort_by_key(|d| std::cmp::Reverse(d.since_ms)),
            Sort::Agent => rows.sort_by(|a, b| a.agent.cmp(&b.agent)),
            Sort::State => rows.sort_by(|a, b| a.state.cmp(&b.state)),
            Sort::Id => rows.sort_by_key(|d| d.id),
        }
        rows
    }

    /// The selected row's index in [`App::rows`]: the selected task's, else the first.
    pub(crate) fn selected_index(&self) -> Option<usize> {
        let rows = self.rows();
        if rows.is_empty() {
            return None;
        }
        Some(
            self.selected
                .and_then(|id| rows.iter().position(|d| d.id == id))
                .unwrap_or(0),
        )
    }

    fn selected_id(&self) -> Option<u64> {
        let index = self.selected_index()?;
        self.rows().get(index).map(|d| d.id)
    }

    fn step(&mut self, by: isize) {
        let rows = self.rows();
        let Some(index) = self.selected_index() else {
            return;
        };
        let last = rows.len() - 1;
        let next = index.saturating_add_signed(by).min(last);
        self.selected = rows.get(next).map(|d| d.id);
    }

    /// Takes a key.
    pub(crate) fn key(&mut self, key: KeyEvent) -> Action {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        match self.mode.clone() {
            Mode::Filter => self.filter_key(key.code),
            Mode::Help(back) => {
                if key.code == KeyCode::Char('q') {
                    return Action::Quit;
                }
                self.mode = back.map_or(Mode::List, Mode::Detail);
                Action::Redraw
            }
            Mode::ConfirmCancel { id, from_detail } => {
                self.mode = if from_detail {
                    Mode::Detail(id)
                } else {
                    Mode::List
                };
                match key.code {
                    KeyCode::Char('y' | 'Y') => Action::Send(Command::Cancel(id)),
                    _ => Action::Redraw,
                }
            }
            Mode::Detail(id) => match key.code {
                KeyCode::Char('q') => Action::Quit,
                KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace => {
                    self.mode = Mode::List;
                    self.model.unwatch();
                    Action::Send(Command::Watch(None))
                }
                KeyCode::Char('c') => {
                    self.mode = Mode::ConfirmCancel {
                        id,
                        from_detail: true,
                    };
                    Action::Redraw
                }
                KeyCode::Char('?') => {
                    self.mode = Mode::Help(Some(id));
                    Action::Redraw
                }
                _ => Action::Redraw,
            },
            Mode::List => self.list_key(key.code),
        }
    }

    fn list_key(&mut self, code: KeyCode) -> Action {
        match code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('j') | KeyCode::Down => self.step(1),
            KeyCode::Char('k') | KeyCode::Up => self.step(-1),
            KeyCode::PageDown => self.step(10),
            KeyCode::PageUp => self.step(-10),
            KeyCode::Home | KeyCode::Char('g') => self.step(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.step(isize::MAX),
            KeyCode::Char('/') => self.mode = Mode::Filter,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('?') => self.mode = Mode::Help(None),
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char(']') => return self.next_shard(1),
            KeyCode::Char('[') => return self.next_shard(-1),
            KeyCode::Enter => {
                if let Some(id) = self.selected_id() {
                    self.selected = Some(id);
                    self.mode = Mode::Detail(id);
                    self.model.watch(id);
                    return Action::Send(Command::Watch(Some(id)));
                }
            }
            KeyCode::Char('c') => {
                if let Some(id) = self.selected_id() {
                    self.selected = Some(id);
                    self.mode = Mode::ConfirmCancel {
                        id,
                        from_detail: false,
                    };
                }
            }
            _ => {}
        }
        Action::Redraw
    }

    /// On a cluster node of more than one shard: the queue of the shard `by` after the
    /// one asked for (around the ends). Elsewhere nothing.
    fn next_shard(&mut self, by: i64) -> Action {
        let Some(count) = self.model.cluster.as_ref().map(|c| c.shard_count()) else {
            return Action::Redraw;
        };
        if count < 2 {
            return Action::Redraw;
        }
        let next = (i64::from(self.shard.min(count - 1)) + by).rem_euclid(i64::from(count));
        self.shard = u32::try_from(next).unwrap_or(0);
        Action::Send(Command::Shard(self.shard))
    }

    fn filter_key(&mut self, code: KeyCode) -> Action {
        match code {
            KeyCode::Enter => self.mode = Mode::List,
            KeyCode::Esc => {
                self.filter.clear();
                self.mode = Mode::List;
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char(c) => self.filter.push(c),
            _ => {}
        }
        Action::Redraw
    }
}

/// Whether `d` has `needle` (lower case) in its id, agent, type, state or wait.
fn matches(d: &Detail, needle: &str) -> bool {
    d.id.to_string() == needle
        || [
            d.agent.as_str(),
            d.task_type.as_str(),
            d.state.as_str(),
            d.priority.as_str(),
            d.waits_on.as_deref().unwrap_or(""),
        ]
        .iter()
        .any(|field| field.to_lowercase().contains(needle))
}

#[cfg(test)]
mod tests {
    use ratatui::crossterm::event::KeyEventKind;

    use super::*;

    fn press(app: &mut App, code: KeyCode) -> Action {
        app.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn typed(app: &mut App, text: &str) {
        for c in text.chars() {
            press(app, KeyCode::Char(c));
        }
    }

    fn ids(app: &App) -> Vec<u64> {
        app.rows().iter().map(|d| d.id).collect()
    }

    /// Five live tasks: two agents, mixed levels and states.
    fn app() -> App {
        let mut model = Model::new("http://127.0.0.1:7420");
        let task = |id, agent: &str, priority: &str, state: &str, since_ms| Detail {
            position: 0,
            id,
            agent: agent.to_owned(),
            task_type: "react-agent".to_owned(),
            priority: priority.to_owned(),
            state: state.to_owned(),
            since_ms,
            waits_on: (state == "waiting").then(|| "llm".to_owned()),
            ..Detail::default()
        };
        // In the order the server sends them under the priority policy.
        model.queue.policy = "priority".to_owned();
        model.queue.details = vec![
            task(5, "carol", "critical", "ready", 0),
            task(2, "bob", "high", "queued", 900),
            task(1, "alice", "normal", "waiting", 300),
            task(4, "bob", "normal", "queued", 500),
            task(3, "alice", "low", "running", 10),
        ];
        for (d, position) in model.queue.details.iter_mut().zip(1..) {
            d.position = position;
        }
        App::new(model)
    }

    #[test]
    fn s_cycles_the_sorts_from_the_policys_order() {
        let mut app = app();
        let mut seen = vec![(app.sort.name(), ids(&app))];
        for _ in 0..5 {
            press(&mut app, KeyCode::Char('s'));
            seen.push((app.sort.name(), ids(&app)));
        }
        assert_eq!(
            seen,
            [
                ("policy", vec![5, 2, 1, 4, 3]),
                ("waited", vec![2, 4, 1, 3, 5]),
                ("agent", vec![1, 3, 2, 4, 5]),
                ("state", vec![2, 4, 5, 3, 1]),
                ("id", vec![1, 2, 3, 4, 5]),
                ("policy", vec![5, 2, 1, 4, 3]),
            ]
        );
    }

    /// The list keeps the server's order, whatever the policy and the scores: only
    /// the server's policy knows it (fifo puts a critical task after an older low one).
    #[test]
    fn the_policys_order_is_the_servers() {
        let mut app = app();
        app.model.queue.policy = "fifo".to_owned();
        let fifo = [1, 2, 3, 4, 5];
        app.model.queue.details.sort_by_key(|d| d.id);
        for (d, position) in app.model.queue.details.iter_mut().zip(1..) {
            d.position = position;
            d.score = i64::try_from(d.id).ok().map(|id| id * 10);
        }
        assert_eq!(ids(&app), fifo);
        // Fair share with the rows as the server ordered them.
        app.model.queue.policy = "fair-share".to_owned();
        app.model.queue.details.reverse();
        assert_eq!(ids(&app), [5, 4, 3, 2, 1]);
        // Sorted by agent, each agent's rows stay in the server's order.
        press(&mut app, KeyCode::Char('s'));
        press(&mut app, KeyCode::Char('s'));
        assert_eq!(app.sort, Sort::Agent);
        assert_eq!(ids(&app), [3, 1, 4, 2, 5]);
    }

    #[test]
    fn slash_filters_as_typed_enter_keeps_it_and_esc_clears_it() {
        let mut app = app();
        press(&mut app, KeyCode::Char('/'));
        assert_eq!(app.mode, Mode::Filter);
        typed(&mut app, "bob");
        assert_eq!(ids(&app), [2, 4]);
        // `q` while typing is a letter, not quit.
        assert_eq!(press(&mut app, KeyCode::Char('q')), Action::Redraw);
        assert_eq!(ids(&app), Vec::<u64>::new());
        press(&mut app, KeyCode::Backspace);
        press(&mut app, KeyCode::Enter);
        assert_eq!((app.mode.clone(), ids(&app)), (Mode::List, vec![2, 4]));
        press(&mut app, KeyCode::Char('/'));
        typed(&mut app, "x");
        press(&mut app, KeyCode::Esc);
        assert_eq!((app.filter.as_str(), ids(&app).len()), ("", 5));
        // A wait and a state match too; an id matches whole.
        app.filter = "llm".to_owned();
        assert_eq!(ids(&app), [1]);
        app.filter = "queued".to_owned();
        assert_eq!(ids(&app), [2, 4]);
        app.filter = "3".to_owned();
        assert_eq!(ids(&app), [3]);
    }

    #[test]
    fn j_and_k_move_the_selection_and_stop_at_the_ends() {
        let mut app = app();
        assert_eq!(app.selected_index(), Some(0));
        press(&mut app, KeyCode::Char('k'));
        assert_eq!(app.selected, Some(5));
        for _ in 0..7 {
            press(&mut app, KeyCode::Char('j'));
        }
        assert_eq!((app.selected, app.selected_index()), (Some(3), Some(4)));
        press(&mut app, KeyCode::Up);
        assert_eq!(app.selected, Some(4));
        // The selection follows its task when the order changes.
        press(&mut app, KeyCode::Char('s'));
        assert_eq!((app.selected, app.selected_index()), (Some(4), Some(1)));
    }

    #[test]
    fn c_asks_first_and_only_y_sends_the_cancel() {
        let mut app = app();
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(press(&mut app, KeyCode::Char('c')), Action::Redraw);
        assert_eq!(
            app.mode,
            Mode::ConfirmCancel {
                id: 2,
                from_detail: false
            }
        );
        assert_eq!(press(&mut app, KeyCode::Char('n')), Action::Redraw);
        assert_eq!(app.mode, Mode::List);
        press(&mut app, KeyCode::Char('c'));
        assert_eq!(
            press(&mut app, KeyCode::Char('y')),
            Action::Send(Command::Cancel(2))
        );
        assert_eq!(app.mode, Mode::List);
    }

    #[test]
    fn enter_opens_the_detail_and_watches_the_task_until_esc() {
        let mut app = app();
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Down);
        assert_eq!(
            press(&mut app, KeyCode::Enter),
            Action::Send(Command::Watch(Some(1)))
        );
        assert_eq!(app.mode, Mode::Detail(1));
        assert_eq!(app.model.task.as_ref().map(|t| t.id), Some(1));
        press(&mut app, KeyCode::Char('c'));
        assert_eq!(
            press(&mut app, KeyCode::Char('y')),
            Action::Send(Command::Cancel(1))
        );
        assert_eq!(app.mode, Mode::Detail(1));
        assert_eq!(
            press(&mut app, KeyCode::Esc),
            Action::Send(Command::Watch(None))
        );
        assert_eq!(
            (app.mode.clone(), app.model.task.clone()),
            (Mode::List, None)
        );
    }

    #[test]
    fn q_quits_help_closes_on_any_other_key_and_ctrl_c_always_quits() {
        let mut app = app();
        press(&mut app, KeyCode::Char('?'));
        assert_eq!(app.mode, Mode::Help(None));
        press(&mut app, KeyCode::Char('x'));
        assert_eq!(app.mode, Mode::List);
        // Over a detail, the help goes back to it.
        press(&mut app, KeyCode::Enter);
        press(&mut app, KeyCode::Char('?'));
        assert_eq!(app.mode, Mode::Help(Some(5)));
        press(&mut app, KeyCode::Esc);
        assert_eq!(app.mode, Mode::Detail(5));
        press(&mut app, KeyCode::Esc);
        assert_eq!(press(&mut app, KeyCode::Char('q')), Action::Quit);
        press(&mut app, KeyCode::Char('/'));
        let ctrl_c = KeyEvent {
            code: KeyCode::Char('c'),
            modifiers: KeyModifiers::CONTROL,
            kind: KeyEventKind::Press,
            state: ratatui::crossterm::event::KeyEventState::NONE,
        };
        assert_eq!(app.key(ctrl_c), Action::Quit);
    }

    #[test]
    fn brackets_step_through_a_clusters_shards_and_do_nothing_on_a_lone_server() {
        use super::super::model::{Cluster, ClusterShard};
        let mut app = app();
        assert_eq!(press(&mut app, KeyCode::Char(']')), Action::Redraw);
        assert_eq!(app.shard, 0);
        app.model.cluster = Some(Cluster {
            shards: (0..3)
                .map(|shard| ClusterShard {
                    shard,
                    ..ClusterShard::default()
                })
                .collect(),
            ..Cluster::default()
        });
        let sent: Vec<Action> = [']', ']', ']', '[', '[']
            .into_iter()
            .map(|c| press(&mut app, KeyCode::Char(c)))
            .collect();
        assert_eq!(
            sent,
            [1, 2, 0, 2, 1].map(|n| Action::Send(Command::Shard(n)))
        );
        // A cluster's ids are shown `SHARD:NUMBER`, and a filter finds them so too.
        app.filter = "0:3".to_owned();
        assert_eq!(ids(&app), [3]);
        // One shard: nothing to step to.
        if let Some(cluster) = &mut app.model.cluster {
            cluster.shards.truncate(1);
        }
        assert_eq!(press(&mut app, KeyCode::Char('[')), Action::Redraw);
    }

    #[test]
    fn keys_on_an_empty_list_do_nothing() {
        let mut app = App::new(Model::new("http://x"));
        for code in [KeyCode::Char('j'), KeyCode::Enter, KeyCode::Char('c')] {
            assert_eq!(press(&mut app, code), Action::Redraw);
        }
        assert_eq!((app.mode, app.selected), (Mode::List, None));
    }
}
