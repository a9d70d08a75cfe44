//! A client that lives inside the process: the server's connection code reads its
//! requests and writes its replies through the ordinary stream calls, but no byte
//! touches a socket. The hop lab (benches/hop_lab.rs) runs connections on it so that
//! the CPU it measures is the server's own work per command, local or cross-core,
//! without the system calls that would otherwise dominate it.
//!
//! The client plays a script of rounds. A round is a run of requests sent at once
//! (one command, or a pipeline) and the exact reply bytes they must produce; the next
//! round is sent only once the whole of this one's reply has been written, as a
//! client waiting for its replies would. After the last round the client closes its
//! side (the connection reads end-of-file). A reply that differs from the script ends
//! the run with the difference, so a lab figure can never come from wrong answers.

use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One round of a script: where its requests and its expected replies lie in the
/// script's two buffers.
#[derive(Clone, Copy, Debug)]
pub struct ScriptRound {
    pub request: (usize, usize),
    pub reply: (usize, usize),
}

/// What a scripted client sends and expects, shared by every client that plays it.
#[derive(Default)]
pub struct Script {
    pub requests: Vec<u8>,
    pub replies: Vec<u8>,
    pub rounds: Vec<ScriptRound>,
}

impl Script {
    /// Appends a round: `request` sent at once, `reply` expected back.
    pub fn push_round(&mut self, request: &[u8], reply: &[u8]) {
        let q = self.requests.len();
        self.requests.extend_from_slice(request);
        let r = self.replies.len();
        self.replies.extend_from_slice(reply);
        self.rounds.push(ScriptRound {
            request: (q, self.requests.len()),
            reply: (r, self.replies.len()),
        });
    }
}

/// How a scripted client's run ended: every round answered as scripted, or the
/// first reply that was not (with the bytes expected and those that came).
pub type ScriptOutcome = Result<(), String>;

/// One in-process client playing `rounds` rounds of a script (cycling through it).
pub struct ScriptedClient {
    script: Rc<Script>,
    /// Rounds still to send, this one included.
    rounds_left: u64,
    /// The round being played (index into the script).
    round: usize,
    /// Bytes of this round's requests the server has read.
    sent: usize,
    /// Bytes of this round's reply the server has written.
    answered: usize,
    /// The server's read, waiting for the next round.
    reader: Option<Waker>,
    on_end: Option<Box<dyn FnOnce(ScriptOutcome)>>,
}

impl ScriptedClient {
    /// A client that plays `rounds` rounds of `script`, then closes; `on_end` hears
    /// how the run ended (once).
    pub fn new(
        script: Rc<Script>,
        rounds: u64,
        on_end: impl FnOnce(ScriptOutcome) + 'static,
    ) -> ScriptedClient {
        ScriptedClient {
            script,
            rounds_left: rounds,
            round: 0,
            sent: 0,
            answered: 0,
            reader: None,
            on_end: Some(Box::new(on_end)),
        }
    }

    fn current(&self) -> ScriptRound {
        self.script.rounds[self.round]
    }

    /// Every round played (or the run ended early, or the script is empty).
    fn finished(&self) -> bool {
        self.rounds_left == 0 || self.script.rounds.is_empty()
    }

    /// Whether the server would find requests to read right now.
    pub(super) fn has_input(&self) -> bool {
        if self.finished() {
            return false;
        }
        let (start, end) = self.current().request;
        self.sent < end - start
    }

    fn end(&mut self, outcome: ScriptOutcome) {
        self.rounds_left = 0;
        if let Some(f) = self.on_end.take() {
            f(outcome);
        }
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// The next requests into `dst`; Pending while this round's reply is incomplete;
    /// Ok(0) once every round has been played.
    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if self.finished() {
            if self.on_end.is_some() {
                self.end(Ok(()));
            }
            return Poll::Ready(Ok(0));
        }
        let (start, end) = self.current().request;
        let left = &self.script.requests[start + self.sent..end];
        if left.is_empty() {
            self.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = left.len().min(dst.len());
        dst[..n].copy_from_slice(&left[..n]);
        self.sent += n;
        Poll::Ready(Ok(n))
    }

    /// Takes reply bytes (all of them: the client never pushes back), checking each
    /// against the script. A difference ends the run with an error, which closes the
    /// connection as a failed send would.
    pub(super) fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            if self.finished() {
                return Err(self.fail(rest, b""));
            }
            let (start, end) = self.current().reply;
            let expected = &self.script.replies[start + self.answered..end];
            let n = rest.len().min(expected.len());
            if rest[..n] != expected[..n] {
                let expected = expected.to_vec();
                return Err(self.fail(rest, &expected));
            }
            rest = &rest[n..];
            self.answered += n;
            if self.answered == end - start {
                self.next_round();
            }
        }
        Ok(buf.len())
    }

    fn next_round(&mut self) {
        self.rounds_left -= 1;
        self.round = (self.round + 1) % self.script.rounds.len();
        self.sent = 0;
        self.answered = 0;
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    fn fail(&mut self, got: &[u8], expected: &[u8]) -> io::Error {
        let text = format!(
            "scripted client: expected {:?}, got {:?}",
            String::from_utf8_lossy(&expected[..expected.len().min(64)]),
            String::from_utf8_lossy(&got[..got.len().min(64)])
        );
        self.end(Err(text.clone()));
        io::Error::other(text)
    }
}

impl Drop for ScriptedClient {
    fn drop(&mut self) {
        // The connection went away before the script ended (the server closed it).
        if self.on_end.is_some() {
            let left = self.rounds_left;
            self.end(Err(format!("connection closed with {left} rounds left")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn two_rounds() -> Rc<Script> {
        let mut script = Script::default();
        script.push_round(b"PING\r\n", b"+PONG\r\n");
        script.push_round(b"GET a\r\nGET b\r\n", b"$-1\r\n$-1\r\n");
        Rc::new(script)
    }

    type Outcome = Rc<RefCell<Option<ScriptOutcome>>>;

    /// A client playing `rounds` rounds of `two_rounds`, and where its outcome lands.
    fn client(rounds: u64) -> (ScriptedClient, Outcome) {
        let outcome: Outcome = Rc::new(RefCell::new(None));
        let seen = outcome.clone();
        let c = ScriptedClient::new(two_rounds(), rounds, move |o| *seen.borrow_mut() = Some(o));
        (c, outcome)
    }

    fn read(client: &mut ScriptedClient, max: usize) -> Poll<io::Result<usize>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut buf = vec![0u8; max];
        client.poll_read(&mut cx, &mut buf)
    }

    #[test]
    fn plays_rounds_in_order_then_closes() {
        let (mut c, outcome) = client(3);
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(6))));
        // Nothing more until the round's reply is complete, sent in pieces.
        assert!(read(&mut c, 64).is_pending());
        assert!(!c.has_input());
        c.send(b"+PO").expect("matching prefix");
        assert!(read(&mut c, 64).is_pending());
        c.send(b"NG\r\n").expect("rest of the reply");
        // The second round, read in two pieces by a small buffer.
        assert!(c.has_input());
        assert!(matches!(read(&mut c, 10), Poll::Ready(Ok(10))));
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(4))));
        // Both replies of the round in one write, then the third round (the script
        // cycles back to its first).
        c.send(b"$-1\r\n$-1\r\n").expect("replies");
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(6))));
        assert!(outcome.borrow().is_none());
        c.send(b"+PONG\r\n").expect("last reply");
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(0))));
        assert_eq!(*outcome.borrow(), Some(Ok(())));
    }

    #[test]
    fn a_wrong_reply_ends_the_run_with_both_texts() {
        let (mut c, outcome) = client(2);
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(6))));
        assert!(c.send(b"-ERR unknown\r\n").is_err());
        let text = outcome
            .borrow()
            .clone()
            .expect("ended")
            .expect_err("failed");
        assert!(
            text.contains("+PONG") && text.contains("-ERR unknown"),
            "{text}"
        );
        // The connection reads end-of-file from then on.
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(0))));
    }

    #[test]
    fn extra_bytes_after_the_last_round_are_an_error() {
        let (mut c, outcome) = client(1);
        assert!(matches!(read(&mut c, 64), Poll::Ready(Ok(6))));
        assert!(c.send(b"+PONG\r\n+PONG\r\n").is_err());
        assert!(outcome.borrow().clone().expect("ended").is_err());
    }

    #[test]
    fn dropped_mid_script_reports_the_rounds_left() {
        let (c, outcome) = client(5);
        drop(c);
        let text = outcome
            .borrow()
            .clone()
            .expect("ended")
            .expect_err("failed");
        assert!(text.contains("5 rounds left"), "{text}");
    }
}
