//! The demo's script: what each agent is asked, which tools the scripted LLM calls for
//! it round by round, and the answer it must end with. Everything is derived from the
//! run's seed and the agent's index, so the LLM and the final check agree without talking.

use serde_json::{Value, json};
use spool_core::RequestError;
use spool_core::SeededRng;

use crate::agent::seed::mix;
use crate::agent::tools::figure_for;

/// Topics the scripted LLM searches for.
const TOPICS: &[&str] = &[
    "rust adoption",
    "coroutine schedulers",
    "token budgets",
    "agent benchmarks",
    "deterministic replay",
    "tool latency",
    "context windows",
    "rate limits",
];

/// Files the scripted LLM reads.
const FILES: &[&str] = &[
    "README.md",
    "Cargo.toml",
    "src/lib.rs",
    "docs/design.md",
    "notes/todo.txt",
    "data/metrics.csv",
];

/// An arithmetic operator of the calc step.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
}

impl Op {
    fn symbol(self) -> char {
        match self {
            Op::Add => '+',
            Op::Sub => '-',
            Op::Mul => '*',
        }
    }

    fn words(self) -> &'static str {
        match self {
            Op::Add => "plus",
            Op::Sub => "minus",
            Op::Mul => "times",
        }
    }

    fn apply(self, lhs: i64, rhs: i64) -> i64 {
        match self {
            Op::Add => lhs + rhs,
            Op::Sub => lhs - rhs,
            Op::Mul => lhs * rhs,
        }
    }
}

/// The left operand of the calc step: a number in the question, or the figure a
/// search of the first round found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Operand {
    Literal(i64),
    FigureOf(String),
}

/// One tool call the scripted LLM asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Search(String),
    ReadFile(String),
    /// The calc step, rendered from [`Script::calc_expr`] when it is asked for.
    Calc,
}

/// One agent's script: its question, its rounds of tool calls, and the calc step whose
/// result the final answer must carry.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    /// The question the agent is given.
    pub(crate) question: String,
    rounds: Vec<Vec<Call>>,
    lhs: Operand,
    op: Op,
    rhs: i64,
}

impl Script {
    /// The script of agent `index` in a run seeded with `seed`.
    pub(crate) fn new(seed: u64, index: usize) -> Script {
        let mut rng = SeededRng::new(mix(seed, index as u64));
        let op = [Op::Add, Op::Sub, Op::Mul][rng.below(3) as usize];
        let rhs = 2 + rng.below(98) as i64;
        let two_rounds = rng.chance(40);
        let (question, lhs, rounds) = if two_rounds {
            let query = pick(&mut rng, TOPICS).to_owned();
            let mut first = vec![Call::Search(query.clone())];
            for _ in 0..rng.below(3) {
                first.push(extra_call(&mut rng));
            }
            let mut second = vec![Call::ReadFile(pick(&mut rng, FILES).to_owned())];
            let at = rng.below(2) as usize;
            second.insert(at, Call::Calc);
            if rng.chance(50) {
                // Some agents only compute in the second round.
                second.retain(|call| *call == Call::Calc);
            }
            let question = format!(
                "Look up the figure for \"{query}\", then give it {} {rhs}.",
                op.words()
            );
            (question, Operand::FigureOf(query), vec![first, second])
        } else {
            let lhs = 10 + rng.below(990) as i64;
            let mut round = Vec::new();
            for _ in 0..rng.below(3) {
                round.push(extra_call(&mut rng));
            }
            let at = rng.below(round.len() as u64 + 1) as usize;
            round.insert(at, Call::Calc);
            let question = format!(
                "What is {lhs} {} {rhs}? Check the notes first.",
                op.symbol()
            );
            (question, Operand::Literal(lhs), vec![round])
        };
        Script {
            question,
            rounds,
            lhs,
            op,
            rhs,
        }
    }

    /// Rounds of tool use before the final answer.
    pub(crate) fn rounds(&self) -> usize {
        self.rounds.len()
    }

    /// Tool calls over all rounds.
    pub(crate) fn tool_calls(&self) -> usize {
        self.rounds.iter().map(Vec::len).sum()
    }

    /// The value the calc step must give, computed here without the calc tool.
    pub(crate) fn expected(&self) -> i64 {
        let lhs = match &self.lhs {
            Operand::Literal(n) => *n,
            Operand::FigureOf(query) => figure_for(query),
        };
        self.op.apply(lhs, self.rhs)
    }

    /// The calc expression, with the left operand resolved from the observations so far.
    fn calc_expr(&self, observations: &[Value]) -> Result<String, RequestError> {
        let lhs = match &self.lhs {
            Operand::Literal(n) => *n,
            Operand::FigureOf(query) => find_figure(observations, query).ok_or_else(|| {
                RequestError::failed(format!(
                    "the script needs the search result for \"{query}\" first"
                ))
            })?,
        };
        Ok(format!("{lhs} {} {}", self.op.symbol(), self.rhs))
    }

    /// The scripted LLM's reply at this point of the conversation: the next round of
    /// tool calls, or the final answer once every round has been observed. The reply
    /// is in the LLM executor's normalized format, `{"content", "tool_calls": [{"id",
    /// "name", "arguments"}], "finish_reason", "usage"}`, as a real endpoint's would be.
    pub(crate) fn reply(&self, observations: &[Value]) -> Result<Value, RequestError> {
        let turn = observations.len();
        if let Some(round) = self.rounds.get(turn) {
            let calls = round
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let (name, arguments) = match call {
                        Call::Search(query) => ("search", json!({"query": query})),
                        Call::ReadFile(path) => ("read_file", json!({"path": path})),
                        Call::Calc => ("calc", json!({"expr": self.calc_expr(observations)?})),
                    };
                    let id = format!("call_{turn}_{i}");
                    Ok(json!({"id": id, "name": name, "arguments": arguments}))
                })
                .collect::<Result<Vec<Value>, RequestError>>()?;
            // No words with the calls, as real models mostly do.
            return Ok(json!({
                "content": null,
                "tool_calls": calls,
                "finish_reason": "tool_calls",
                "usage": null,
            }));
        }
        if turn > self.rounds.len() {
            return Err(RequestError::InvalidArguments {
                message: format!(
                    "turn {turn} is past the script's {} rounds",
                    self.rounds.len()
                ),
            });
        }
        let calc = observations
            .iter()
            .flat_map(|round| round.as_array().into_iter().flatten())
            .find(|obs| obs["tool"] == "calc")
            .ok_or_else(|| RequestError::failed("no calc result among the observations"))?;
        let expr = calc["result"]["expr"].as_str().unwrap_or("?");
        let value = calc["result"]["value"].as_i64().ok_or_else(|| {
            RequestError::failed(format!("the calc tool gave no value: {}", calc["error"]))
        })?;
        Ok(json!({
            "content": format!("{expr} = {value}."),
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": null,
        }))
    }

    /// Checks an agent's final value against this script: its name, its number of
    /// LLM turns and tool calls, and the calc result in its answer.
    pub(crate) fn verify(&self, agent: &str, value: &Value) -> Result<(), String> {
        if value["agent"] != agent {
            return Err(format!(
                "answer is signed {} instead of {agent}",
                value["agent"]
            ));
        }
        let turns = value["turns"].as_u64();
        if turns != Some(self.rounds() as u64 + 1) {
            return Err(format!(
                "{turns:?} LLM turns, expected {}",
                self.rounds() + 1
            ));
        }
        let calls = value["tool_calls"].as_u64();
        if calls != Some(self.tool_calls() as u64) {
            return Err(format!(
                "{calls:?} tool calls, expected {}",
                self.tool_calls()
            ));
        }
        let answer = value["answer"].as_str().unwrap_or_default();
        let want = format!("= {}.", self.expected());
        if !answer.ends_with(&want) {
            return Err(format!("answer {answer:?} does not end with {want:?}"));
        }
        Ok(())
    }
}

fn pick<'a>(rng: &mut SeededRng, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len() as u64) as usize]
}

/// A search or a file read besides the calc step.
fn extra_call(rng: &mut SeededRng) -> Call {
    if rng.chance(50) {
        Call::Search(pick(rng, TOPICS).to_owned())
    } else {
        Call::ReadFile(pick(rng, FILES).to_owned())
    }
}

/// The figure a search for `query` found, among the observations.
fn find_figure(observations: &[Value], query: &str) -> Option<i64> {
    observations
        .iter()
        .flat_map(|round| round.as_array().into_iter().flatten())
        .find(|obs| obs["tool"] == "search" && obs["args"]["query"] == query)
        .and_then(|obs| obs["result"]["figure"].as_i64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_vary_with_the_seed_and_stay_fixed_for_one() {
        let a: Vec<_> = (0..50).map(|i| Script::new(1, i).question).collect();
        let b: Vec<_> = (0..50).map(|i| Script::new(1, i).question).collect();
        let c: Vec<_> = (0..50).map(|i| Script::new(2, i).question).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let scripts: Vec<_> = (0..200).map(|i| Script::new(7, i)).collect();
        assert!(scripts.iter().any(|s| s.rounds() == 2));
        assert!(scripts.iter().any(|s| s.rounds() == 1));
        assert!(
            scripts
                .iter()
                .any(|s| s.rounds.iter().any(|r| r.len() >= 3))
        );
    }

    #[test]
    fn verify_accepts_only_the_scripted_answer() {
        let script = Script::new(5, 11);
        let answer = |value: i64| {
            json!({
                "agent": "agent-11",
                "answer": format!("1 + 1 = {value}."),
                "turns": script.rounds() + 1,
                "tool_calls": script.tool_calls(),
            })
        };
        let expected = script.expected();
        assert_eq!(script.verify("agent-11", &answer(expected)), Ok(()));
        assert!(script.verify("agent-11", &answer(expected + 1)).is_err());
        assert!(script.verify("agent-12", &answer(expected)).is_err());
        let mut short = answer(expected);
        short["tool_calls"] = json!(0);
        assert!(script.verify("agent-11", &short).is_err());
    }

    #[test]
    fn a_two_round_script_waits_for_its_search() {
        let script = (0..100)
            .map(|i| Script::new(3, i))
            .find(|s| s.rounds() == 2)
            .expect("some script of 100 has two rounds");
        let first = script.reply(&[]).expect("first reply");
        assert_eq!(first["tool_calls"][0]["name"], "search");
        // Without the search result the calc step cannot be written.
        assert!(script.reply(&[json!([])]).is_err());
    }
}
