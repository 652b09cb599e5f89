//! Random expressions never panic, and whatever spool's checks let through, croner takes.

use spool_core::{CronSpec, SeededRng, SpecError};

use crate::ts;

const ALPHABET: &[u8] = b"0123456789*/,-? LWJANMONFRIDEC#@x";

fn pick<'a>(rng: &mut SeededRng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

fn check(expr: &str) {
    match CronSpec::parse(expr, "America/New_York") {
        Ok(spec) => {
            let next = spec.next_after(ts("2027-11-07T05:10:00Z"));
            assert!(next.is_some(), "{expr:?} parsed but never fires");
            let _ = spec.last_between(ts("2027-01-01T00:00:00Z"), ts("2027-11-07T05:10:00Z"));
        }
        Err(SpecError::Rejected { reason, .. }) => {
            panic!("{expr:?} passed spool's checks, croner refused it: {reason}")
        }
        Err(_) => {}
    }
}

#[test]
fn random_strings_of_cron_characters() {
    let mut rng = SeededRng::new(7);
    for _ in 0..20_000 {
        let len = rng.below(24) as usize;
        let expr: String = (0..len)
            .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize] as char)
            .collect();
        check(&expr);
    }
}

#[test]
fn random_well_formed_expressions() {
    let mut rng = SeededRng::new(11);
    let numbers = [
        "0", "1", "2", "5", "7", "12", "13", "23", "29", "30", "31", "59", "60",
    ];
    let names = ["MON", "sun", "Sat", "JAN", "feb", "Dec"];
    let steps = ["1", "2", "3", "5", "7", "12", "23", "31", "59"];
    for _ in 0..5_000 {
        let fields: Vec<String> = (0..5)
            .map(|_| {
                let items = 1 + rng.below(3);
                (0..items)
                    .map(|_| {
                        let base = match rng.below(5) {
                            0 => "*".to_string(),
                            1 => "?".to_string(),
                            2 => pick(&mut rng, &names).to_string(),
                            3 => {
                                format!("{}-{}", pick(&mut rng, &numbers), pick(&mut rng, &numbers))
                            }
                            _ => pick(&mut rng, &numbers).to_string(),
                        };
                        if rng.chance(30) {
                            format!("{base}/{}", pick(&mut rng, &steps))
                        } else {
                            base
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        check(&fields.join(" "));
    }
}

#[test]
fn the_ends_of_time_do_not_panic() {
    use std::time::Duration;

    use jiff::Timestamp;
    use spool_core::Spec;

    let specs = [
        Spec::Cron(CronSpec::parse("0 0 29 2 *", "America/New_York").unwrap()),
        Spec::Cron(CronSpec::parse("* * * * *", "UTC").unwrap()),
        Spec::Every(Duration::from_secs(60)),
        Spec::Every(Duration::MAX),
        Spec::Once(Timestamp::MAX),
    ];
    let ends = [Timestamp::MIN, Timestamp::MAX, ts("4999-12-31T23:59:00Z")];
    for spec in &specs {
        for &a in &ends {
            let _ = spec.next_after(a);
            for &b in &ends {
                let _ = spec.last_between(a, b);
            }
        }
    }
    // Croner looks no further than the year 5000.
    let leap = CronSpec::parse("0 0 29 2 *", "UTC").unwrap();
    assert_eq!(leap.next_after(ts("4999-01-01T00:00:00Z")), None);
    assert_eq!(
        Spec::Every(Duration::from_secs(60)).next_after(Timestamp::MAX),
        None
    );
}
