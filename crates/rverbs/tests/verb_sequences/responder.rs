//! The responder's side of `verb_sequences`: its QP, CQ and region, and the SRQ its QPs
//! take receives from, if any, served by one piece of code ([`Served::serve`]) in this
//! process or in a child process (this test binary run again, [`ChildProcess`]), which the model
//! drives one call per line over the child's stdin and stdout. In another process the
//! requester reaches the responder's memory as a peer does (cross-memory attach or a
//! shared segment, docs/memory.md), and takes its receives from the shared ring.

use std::io::{BufRead, Write};
use std::process::ChildStdin;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use super::common::{remote, spawn_child, Side, ALL_ACCESS, PATH};
use super::{contents, extra_completion, poll_n, side_on_device, srq_of, Held, RecvWant, LEN, REGION_ACCESS, UNKNOWN_KEY};
use rverbs::*;

/// The environment variable that makes the test binary a child responder: its QP type
/// ("rc", "uc") and where its receives are ("rq": in its QP's queue, "srq": in an SRQ),
/// as "rc rq".
const ROLE: &str = "RVERBS_VERB_SEQUENCES_RESPONDER";

/// How long the model waits for the child's answer to one call.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The responder region's address and keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) iova: u64,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// What the model asks of the responder.
#[derive(Debug)]
enum Call {
    /// Its region's address and keys.
    Keys,
    /// Post a receive into its region (its SRQ's, if it has one).
    Post(Held),
    /// Up to `n` receive completions, waiting at most 10 s.
    Poll(usize),
    /// Nothing may arrive on its CQ in 5 ms.
    Nothing,
    /// Every completion its CQ holds, dropped (what a failed case left).
    Drain,
    /// Its region's bytes.
    Contents,
    /// These bytes written into its region.
    Fill(Vec<u8>),
    /// A new region holding these bytes in place of the old one, whose last handle is
    /// dropped.
    NewRegion(Vec<u8>),
    /// A new QP (taking receives from the SRQ, if any) in place of the old one.
    NewQp,
    /// Its QP connected to the requester's QP of this number on the same host.
    Connect(u32),
    /// A new SRQ in place of the old one, if it has one.
    NewSrq,
    /// A type 2 window bound over `len` bytes at `off` of its region with every remote
    /// right, by a BIND_MW work request on its QP; the window before is deallocated.
    Bind { off: usize, len: usize },
}

/// What the responder answers.
#[derive(Debug)]
enum Answer {
    Keys(Keys),
    Done,
    Polled(Vec<RecvWant>),
    Bytes(Vec<u8>),
    Qpn(u32),
    Key(u32),
    Failed(String),
}

/// The responder's objects, and the one code that serves the model's calls on them,
/// wherever they live.
pub(crate) struct Served {
    pub(crate) side: Side,
    pub(crate) srq: Option<Srq>,
    /// The window bound over the region, if any.
    window: Option<Mw>,
    /// The type of its QPs.
    qp_type: QpType,
}

impl Served {
    pub(crate) fn new(side: Side, srq: bool, qp_type: QpType) -> Served {
        let srq = srq.then(|| srq_of(&side));
        Served { side, srq, window: None, qp_type }
    }

    fn keys(&self) -> Keys {
        Keys { iova: self.side.mr.iova(), lkey: self.side.mr.lkey(), rkey: self.side.mr.rkey() }
    }

    fn serve(&mut self, call: Call) -> Answer {
        let b = &self.side;
        match call {
            Call::Keys => Answer::Keys(self.keys()),
            Call::Post(r) => {
                let sges: Vec<Sge> = r
                    .dst
                    .iter()
                    .enumerate()
                    .map(|(k, &(off, len))| match k == 0 && r.bad {
                        // Room for any SEND: the bad key, not a length, is what fails.
                        true => Sge { addr: b.mr.iova() + off as u64, length: LEN as u32, lkey: UNKNOWN_KEY },
                        false => Sge { addr: b.mr.iova() + off as u64, length: len as u32, lkey: b.mr.lkey() },
                    })
                    .collect();
                let wr = [RecvWr::new(r.id, &sges)];
                let posted = match (&self.srq, r.pinned) {
                    (Some(q), true) => q.post_recv(&wr),
                    (Some(q), false) => q.post_recv_unpinned(&wr),
                    (None, true) => b.qp.post_recv(&wr),
                    (None, false) => b.qp.post_recv_unpinned(&wr),
                };
                posted.map_or_else(|e| Answer::Failed(format!("post_recv: {e:?}")), |()| Answer::Done)
            }
            Call::Poll(n) => Answer::Polled(
                poll_n(&b.cq, n).iter().map(|w| (w.wr_id(), w.status(), w.opcode().map(|op| (op, w.byte_len().unwrap_or(0), w.imm_data())))).collect(),
            ),
            Call::Nothing => extra_completion(&b.cq).map_or(Answer::Done, |wc| Answer::Failed(format!("{wc:?}"))),
            Call::Drain => {
                while b.cq.poll(&mut [Wc::default(); 8]).unwrap() > 0 {}
                Answer::Done
            }
            Call::Contents => Answer::Bytes(contents(&b.mr)),
            Call::Fill(bytes) => {
                b.mr.write(0, &bytes).unwrap();
                Answer::Done
            }
            Call::NewRegion(bytes) => {
                self.window = None;
                let mr = b.pd.alloc_mr(LEN, REGION_ACCESS).unwrap();
                mr.write(0, &bytes).unwrap();
                drop(std::mem::replace(&mut self.side.mr, mr));
                Answer::Keys(self.keys())
            }
            Call::NewQp => {
                self.window = None;
                let qp = b.pd.create_qp(&QpInit { srq: self.srq.as_ref(), ..QpInit::new(self.qp_type, &b.cq, super::CAP) }).unwrap();
                std::mem::replace(&mut self.side.qp, qp).destroy().unwrap();
                Answer::Qpn(self.side.qp.qp_num())
            }
            Call::Connect(qpn) => {
                b.qp.connect(&path_to(&b.ctx, qpn, self.qp_type)).unwrap();
                Answer::Done
            }
            Call::NewSrq => {
                if self.srq.is_some() {
                    self.srq = Some(srq_of(b));
                }
                Answer::Done
            }
            Call::Bind { off, len } => {
                self.window = None;
                let mw = Mw::new(&b.pd, 2).unwrap();
                let key = inc_rkey(mw.rkey());
                let access = ALL_ACCESS;
                let bind = MwBind { mr: Some(&b.mr), addr: b.mr.iova() + off as u64, length: len as u64, access };
                if let Err(e) = b.qp.post_send(&[SendWr::bind_mw(0, &mw, key, bind).signaled()]) {
                    return Answer::Failed(format!("bind_mw: {e:?}"));
                }
                match poll_n(&b.cq, 1).first() {
                    Some(wc) if wc.status() == WcStatus::Success && wc.opcode() == Some(WcOpcode::BindMw) => {
                        self.window = Some(mw);
                        Answer::Key(key)
                    }
                    wc => Answer::Failed(format!("bind_mw completed with {wc:?}")),
                }
            }
        }
    }
}

/// The responder in a child process.
pub(crate) struct ChildProcess {
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
    srq: bool,
}

impl ChildProcess {
    /// Runs this test binary again as a responder, in test `test` (which must call
    /// [`serve_if_child`] first).
    pub(crate) fn spawn(test: &str, srq: bool, qp_type: QpType) -> ChildProcess {
        let kind = match qp_type {
            QpType::Uc => "uc",
            QpType::Ud => "ud",
            _ => "rc",
        };
        let role = format!("{kind} {}", if srq { "srq" } else { "rq" });
        let (child, stdin, answers) = spawn_child(test, &[(ROLE, &role)]);
        ChildProcess { child, stdin: Some(stdin), answers, srq }
    }

    fn call(&mut self, call: Call) -> Answer {
        let stdin = self.stdin.as_mut().expect("pipe open");
        writeln!(stdin, "{}", encode_call(&call)).unwrap();
        stdin.flush().unwrap();
        match self.answers.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => decode_answer(&line),
            Err(e) => {
                let _ = self.child.kill();
                panic!("the responder process gave no answer to {call:?} in {ANSWER_TIMEOUT:?}: {e}");
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // End of its input: the child returns from its test and exits.
        self.stdin = None;
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        while self.child.try_wait().ok().flatten().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// In a child started by [`ChildProcess::spawn`]: serves the model's calls until its input
/// ends, and returns `true`; elsewhere `false` at once.
pub(crate) fn serve_if_child() -> bool {
    let Ok(role) = std::env::var(ROLE) else { return false };
    let qp_type = match &role[..2] {
        "uc" => QpType::Uc,
        "ud" => QpType::Ud,
        _ => QpType::Rc,
    };
    let mut r = Served::new(side_on_device(super::common::open()), role.ends_with("srq"), qp_type);
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let answer = r.serve(decode_call(&line));
        println!("@@ {}", encode_answer(&answer));
        std::io::stdout().flush().unwrap();
    }
    true
}

/// The responder, here or in a child process.
pub(crate) enum Responder {
    Here(Served),
    Child(ChildProcess),
}

impl Responder {
    fn call(&mut self, call: Call) -> Answer {
        match self {
            Responder::Here(r) => r.serve(call),
            Responder::Child(r) => r.call(call),
        }
    }

    fn done(&mut self, call: Call) -> Result<(), String> {
        match self.call(call) {
            Answer::Done => Ok(()),
            Answer::Failed(e) => Err(e),
            a => panic!("unexpected answer {a:?}"),
        }
    }

    fn keys_of(&mut self, call: Call) -> Keys {
        match self.call(call) {
            Answer::Keys(k) => k,
            a => panic!("unexpected answer {a:?}"),
        }
    }

    pub(crate) fn has_srq(&self) -> bool {
        match self {
            Responder::Here(r) => r.srq.is_some(),
            Responder::Child(r) => r.srq,
        }
    }

    pub(crate) fn keys(&mut self) -> Keys {
        self.keys_of(Call::Keys)
    }

    pub(crate) fn post(&mut self, r: &Held) -> Result<(), String> {
        self.done(Call::Post(r.clone()))
    }

    pub(crate) fn poll(&mut self, n: usize) -> Vec<RecvWant> {
        match self.call(Call::Poll(n)) {
            Answer::Polled(v) => v,
            a => panic!("unexpected answer {a:?}"),
        }
    }

    /// `Err` with the completion that arrived, if one did in 5 ms.
    pub(crate) fn nothing(&mut self) -> Result<(), String> {
        self.done(Call::Nothing)
    }

    pub(crate) fn drain(&mut self) {
        self.done(Call::Drain).unwrap();
    }

    pub(crate) fn contents(&mut self) -> Vec<u8> {
        match self.call(Call::Contents) {
            Answer::Bytes(b) => b,
            a => panic!("unexpected answer {a:?}"),
        }
    }

    pub(crate) fn fill(&mut self, bytes: &[u8]) {
        self.done(Call::Fill(bytes.to_vec())).unwrap();
    }

    /// The new region's keys.
    pub(crate) fn new_region(&mut self, bytes: &[u8]) -> Keys {
        self.keys_of(Call::NewRegion(bytes.to_vec()))
    }

    /// The new QP's number.
    pub(crate) fn new_qp(&mut self) -> u32 {
        match self.call(Call::NewQp) {
            Answer::Qpn(n) => n,
            a => panic!("unexpected answer {a:?}"),
        }
    }

    /// Its QP connected to requester QP `qpn` of this host (the fixtures' path).
    pub(crate) fn connect(&mut self, qpn: u32) {
        self.done(Call::Connect(qpn)).unwrap();
    }

    pub(crate) fn new_srq(&mut self) {
        self.done(Call::NewSrq).unwrap();
    }

    /// The new window's key ([`Call::Bind`]).
    pub(crate) fn bind(&mut self, off: usize, len: usize) -> Result<u32, String> {
        match self.call(Call::Bind { off, len }) {
            Answer::Key(k) => Ok(k),
            Answer::Failed(e) => Err(e),
            a => panic!("unexpected answer {a:?}"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn encode_call(call: &Call) -> String {
    match call {
        Call::Keys => "keys".into(),
        Call::Post(r) => {
            let pieces: Vec<String> = r.dst.iter().map(|(o, l)| format!("{o}:{l}")).collect();
            format!("post {} {} {} {} {}", r.id, r.bad, r.pinned, r.gen, pieces.join(","))
        }
        Call::Poll(n) => format!("poll {n}"),
        Call::Nothing => "nothing".into(),
        Call::Drain => "drain".into(),
        Call::Contents => "contents".into(),
        Call::Fill(b) => format!("fill {}", hex(b)),
        Call::NewRegion(b) => format!("region {}", hex(b)),
        Call::NewQp => "qp".into(),
        Call::Connect(n) => format!("connect {n}"),
        Call::NewSrq => "srq".into(),
        Call::Bind { off, len } => format!("bind {off} {len}"),
    }
}

fn decode_call(line: &str) -> Call {
    let w: Vec<&str> = line.split(' ').collect();
    match w[0] {
        "keys" => Call::Keys,
        "post" => {
            let dst = w[5]
                .split(',')
                .map(|p| {
                    let (o, l) = p.split_once(':').unwrap();
                    (o.parse().unwrap(), l.parse().unwrap())
                })
                .collect();
            Call::Post(Held { id: w[1].parse().unwrap(), bad: w[2].parse().unwrap(), pinned: w[3].parse().unwrap(), gen: w[4].parse().unwrap(), dst })
        }
        "poll" => Call::Poll(w[1].parse().unwrap()),
        "nothing" => Call::Nothing,
        "drain" => Call::Drain,
        "contents" => Call::Contents,
        "fill" => Call::Fill(unhex(w[1])),
        "region" => Call::NewRegion(unhex(w[1])),
        "qp" => Call::NewQp,
        "connect" => Call::Connect(w[1].parse().unwrap()),
        "srq" => Call::NewSrq,
        "bind" => Call::Bind { off: w[1].parse().unwrap(), len: w[2].parse().unwrap() },
        other => panic!("unknown call {other}"),
    }
}

fn encode_answer(a: &Answer) -> String {
    match a {
        Answer::Keys(k) => format!("keys {} {} {}", k.iova, k.lkey, k.rkey),
        Answer::Done => "done".into(),
        Answer::Polled(v) => {
            let wcs: Vec<String> = v
                .iter()
                .map(|(id, st, op)| match op {
                    Some((op, len, imm)) => format!("{id}:{}:{}:{len}:{}", *st as u32, *op as u32, imm.map_or("-".into(), |i| i.to_string())),
                    None => format!("{id}:{}", *st as u32),
                })
                .collect();
            format!("polled {}", wcs.join(",")).trim_end().into()
        }
        Answer::Bytes(b) => format!("bytes {}", hex(b)),
        Answer::Qpn(n) => format!("qpn {n}"),
        Answer::Key(k) => format!("key {k}"),
        Answer::Failed(e) => format!("failed {e}"),
    }
}

fn decode_answer(line: &str) -> Answer {
    let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
    match head {
        "keys" => {
            let w: Vec<&str> = rest.split(' ').collect();
            Answer::Keys(Keys { iova: w[0].parse().unwrap(), lkey: w[1].parse().unwrap(), rkey: w[2].parse().unwrap() })
        }
        "done" => Answer::Done,
        "polled" => Answer::Polled(
            rest.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let f: Vec<&str> = s.split(':').collect();
                    let status = WcStatus::from_raw(f[1].parse().unwrap()).unwrap();
                    let op = (f.len() > 2).then(|| {
                        let imm = (f[4] != "-").then(|| f[4].parse().unwrap());
                        (WcOpcode::from_raw(f[2].parse().unwrap()).unwrap(), f[3].parse().unwrap(), imm)
                    });
                    (f[0].parse().unwrap(), status, op)
                })
                .collect(),
        ),
        "bytes" => Answer::Bytes(unhex(rest)),
        "qpn" => Answer::Qpn(rest.parse().unwrap()),
        "key" => Answer::Key(rest.parse().unwrap()),
        "failed" => Answer::Failed(rest.into()),
        other => panic!("unknown answer {other}"),
    }
}

/// The path a QP of `qp_type` on `ctx` is connected with towards QP `qpn`: the fixtures'
/// over this host's loopback address, or for UD, which is not connected (its work
/// requests carry their address), none (a device of the cross-host links has no loopback
/// address).
pub(crate) fn path_to(ctx: &Context, qpn: u32, qp_type: QpType) -> RemotePath {
    match qp_type {
        QpType::Ud => RemotePath { access: ALL_ACCESS, ..RemotePath::new(Gid::default(), 0, qpn) },
        _ => remote(ctx, qpn, &PATH, ALL_ACCESS),
    }
}
