//! The requests a task has in flight, and the answers it has not taken yet.
//!
//! Most tasks have one request out at a time, so one is kept inline and only a
//! parallel fan-out allocates.

use serde_json::Value;

use crate::kind::Kind;
use crate::payload::Payload;
use crate::request::{Answer, Request, RequestError};

/// Where an in-flight request is: held by the scheduler at its kind's gate, or out —
/// let go for the driver to send (and whether it is counted against its gate and
/// agent), and whether the driver has taken it yet.
///
/// A request is out from the end of the input that let it go (the poll that made it,
/// or the gate's release): everything the scheduler decides follows from that, so its
/// behaviour never depends on when the driver drains. Whether the driver took it
/// decides one output only: ending its task sends a cancel signal for a request the
/// driver took, and none for one it never will.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    /// Held at its kind's gate (or behind its agent's cap).
    Unsent,
    /// Out, not counted against a gate, not taken yet.
    Sent,
    /// Out, not counted against a gate, taken by the driver.
    Taken,
    /// Out through its gate in the gate's back-off epoch `.0` (it fits in the padding
    /// beside the payload, so it costs a request nothing), not taken yet.
    Counted(u32),
    /// Out through its gate in epoch `.0`, taken by the driver.
    CountedTaken(u32),
}

impl Out {
    /// The same place, not taken by the driver yet.
    pub(crate) fn untaken(self) -> Out {
        match self {
            Out::Taken => Out::Sent,
            Out::CountedTaken(epoch) => Out::Counted(epoch),
            other => other,
        }
    }
}

#[derive(Debug)]
pub(crate) enum Status {
    InFlight(Payload, Out),
    /// Errors are rare and large: boxed, they keep every pending request small.
    Answered(Result<Value, Box<RequestError>>),
}

#[derive(Debug)]
pub(crate) struct PendingRequest {
    pub(crate) number: u32,
    pub(crate) kind: Kind,
    pub(crate) tokens: u32,
    pub(crate) status: Status,
}

impl PendingRequest {
    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.status, Status::InFlight(..))
    }

    /// Whether it is in flight and out.
    pub(crate) fn sent(&self) -> bool {
        matches!(self.status, Status::InFlight(_, out) if out != Out::Unsent)
    }

    /// Whether it is in flight and the driver took it (cancel signals go only to
    /// these).
    pub(crate) fn taken(&self) -> bool {
        matches!(
            self.status,
            Status::InFlight(_, Out::Taken | Out::CountedTaken(_))
        )
    }

    /// Whether it is in flight and counted against its kind's gate and agent's cap.
    pub(crate) fn counted(&self) -> bool {
        matches!(
            self.status,
            Status::InFlight(_, Out::Counted(_) | Out::CountedTaken(_))
        )
    }

    /// The back-off epoch of its gate when it was sent through it (0 if it was not).
    pub(crate) fn sent_epoch(&self) -> u32 {
        match self.status {
            Status::InFlight(_, Out::Counted(epoch) | Out::CountedTaken(epoch)) => epoch,
            _ => 0,
        }
    }

    /// Where it is, if it is in flight.
    #[inline(always)]
    pub(crate) fn out(&self) -> Option<Out> {
        match self.status {
            Status::InFlight(_, out) => Some(out),
            Status::Answered(_) => None,
        }
    }

    /// Whether it is in flight and held by the scheduler at a gate.
    pub(crate) fn unsent(&self) -> bool {
        matches!(self.status, Status::InFlight(_, Out::Unsent))
    }

    /// Moves an in-flight request to `out`.
    #[inline(always)]
    pub(crate) fn set_out(&mut self, out: Out) {
        if let Status::InFlight(_, o) = &mut self.status {
            *o = out;
        }
    }

    /// Its payload, while it is in flight.
    pub(crate) fn payload(&self) -> Option<&Payload> {
        match &self.status {
            Status::InFlight(payload, _) => Some(payload),
            Status::Answered(_) => None,
        }
    }

    /// The request as it was sent, if it is still in flight.
    #[inline(always)]
    pub(crate) fn request(&self) -> Option<Request> {
        match &self.status {
            Status::InFlight(payload, _) => Some(Request {
                kind: self.kind.clone(),
                payload: payload.clone(),
                tokens: self.tokens,
            }),
            Status::Answered(_) => None,
        }
    }

    fn into_answer(self) -> Option<Answer> {
        match self.status {
            Status::Answered(result) => Some(Answer {
                number: self.number,
                result: result.map_err(|error| *error),
            }),
            Status::InFlight(..) => None,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) enum PendingSet {
    #[default]
    Empty,
    One(PendingRequest),
    Many(Vec<PendingRequest>),
}

impl PendingSet {
    pub(crate) fn push(&mut self, request: PendingRequest) {
        match self {
            PendingSet::Empty => *self = PendingSet::One(request),
            PendingSet::Many(all) => all.push(request),
            PendingSet::One(_) => {
                if let PendingSet::One(first) = std::mem::take(self) {
                    *self = PendingSet::Many(vec![first, request]);
                }
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[PendingRequest] {
        match self {
            PendingSet::Empty => &[],
            PendingSet::One(one) => std::slice::from_ref(one),
            PendingSet::Many(all) => all,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [PendingRequest] {
        match self {
            PendingSet::Empty => &mut [],
            PendingSet::One(one) => std::slice::from_mut(one),
            PendingSet::Many(all) => all,
        }
    }

    /// The in-flight request with this number.
    #[inline]
    pub(crate) fn in_flight_mut(&mut self, number: u32) -> Option<&mut PendingRequest> {
        self.as_mut_slice()
            .iter_mut()
            .find(|p| p.number == number && p.in_flight())
    }

    /// Takes the answered request with the lowest number.
    #[inline]
    pub(crate) fn take_first_answer(&mut self) -> Option<Answer> {
        if let PendingSet::One(one) = self {
            if one.in_flight() {
                return None;
            }
            return match std::mem::take(self) {
                PendingSet::One(one) => one.into_answer(),
                _ => None,
            };
        }
        let index = self.as_slice().iter().position(|p| !p.in_flight())?;
        self.remove(index).into_answer()
    }

    /// Takes the answer to request `number`, if it has arrived.
    #[inline]
    pub(crate) fn take_answer(&mut self, number: u32) -> Option<Answer> {
        if let PendingSet::One(one) = self {
            if one.number != number || one.in_flight() {
                return None;
            }
            return match std::mem::take(self) {
                PendingSet::One(one) => one.into_answer(),
                _ => None,
            };
        }
        let index = self
            .as_slice()
            .iter()
            .position(|p| p.number == number && !p.in_flight())?;
        self.remove(index).into_answer()
    }

    /// A copy of request `number`, to send out, if it is in flight, out and not taken
    /// yet; marks it taken by the driver. A request goes to its executor once each time
    /// it goes out, however many times its key was queued (a snapshot of a replay made
    /// by an earlier version can queue one twice).
    #[inline(always)]
    pub(crate) fn send(&mut self, number: u32) -> Option<Request> {
        let p = match self {
            PendingSet::One(one) if one.number == number => one,
            PendingSet::Many(all) => all.iter_mut().find(|p| p.number == number)?,
            _ => return None,
        };
        let Status::InFlight(payload, out) = &mut p.status else {
            return None;
        };
        *out = match *out {
            Out::Sent => Out::Taken,
            Out::Counted(epoch) => Out::CountedTaken(epoch),
            Out::Unsent | Out::Taken | Out::CountedTaken(_) => return None,
        };
        Some(Request {
            kind: p.kind.clone(),
            payload: payload.clone(),
            tokens: p.tokens,
        })
    }

    /// Drops answers the task did not take during its poll.
    #[inline]
    pub(crate) fn drop_answers(&mut self) {
        match self {
            PendingSet::Empty => {}
            PendingSet::One(one) => {
                if !one.in_flight() {
                    *self = PendingSet::Empty;
                }
            }
            PendingSet::Many(all) => {
                all.retain(PendingRequest::in_flight);
                self.normalize();
            }
        }
    }

    /// Empties the set, returning what was in it.
    pub(crate) fn take_all(&mut self) -> Vec<PendingRequest> {
        match std::mem::take(self) {
            PendingSet::Empty => Vec::new(),
            PendingSet::One(one) => vec![one],
            PendingSet::Many(all) => all,
        }
    }

    fn remove(&mut self, index: usize) -> PendingRequest {
        match std::mem::take(self) {
            PendingSet::One(one) => one,
            PendingSet::Many(mut all) => {
                let removed = all.remove(index);
                *self = PendingSet::Many(all);
                self.normalize();
                removed
            }
            PendingSet::Empty => unreachable!("remove is only called with an index from as_slice"),
        }
    }

    fn normalize(&mut self) {
        if let PendingSet::Many(all) = self {
            match all.len() {
                0 => *self = PendingSet::Empty,
                1 => {
                    if let Some(one) = all.pop() {
                        *self = PendingSet::One(one);
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(number: u32, out: Out) -> PendingRequest {
        PendingRequest {
            number,
            kind: Kind::Llm,
            tokens: 0,
            status: Status::InFlight(Payload::from(json!({"n": number})), out),
        }
    }

    /// A request goes to the driver once each time it goes out: a key queued twice
    /// gives it the second time only if it went out again in between.
    #[test]
    fn a_request_is_taken_once_each_time_it_goes_out() {
        let mut set = PendingSet::default();
        set.push(request(1, Out::Counted(0)));
        set.push(request(2, Out::Sent));
        set.push(request(3, Out::Unsent));
        let taken = |set: &mut PendingSet, n| set.send(n).map(|r| r.payload.value().clone());
        assert_eq!(taken(&mut set, 1), Some(json!({"n": 1})));
        assert_eq!(taken(&mut set, 1), None);
        assert_eq!(set.as_slice()[0].out(), Some(Out::CountedTaken(0)));
        assert_eq!(taken(&mut set, 2), Some(json!({"n": 2})));
        assert_eq!(taken(&mut set, 2), None);
        assert_eq!(set.as_slice()[1].out(), Some(Out::Taken));
        assert_eq!(taken(&mut set, 3), None);
        // Out again (a resend after a restore): it goes again.
        set.as_mut_slice()[0].set_out(Out::Sent);
        assert_eq!(taken(&mut set, 1), Some(json!({"n": 1})));
    }
}
