//! The fault plan of the verbs: chosen verbs fail with an error their man page documents,
//! and chosen send work requests complete with a chosen error status, selected by verb,
//! QP, `wr_id`, the Nth matching call or a seeded probability — so that an application's
//! error paths run on purpose, and every failure reproduces from the plan and its seed.
//!
//! The plan is part of `RVERBS_FAULTS` (docs/fault-injection.md), beside the packet faults
//! of [`crate::fault`], in the same comma-separated list:
//!
//! - `fail=VERB:ERRNO[:SELECT…]`: the verb returns `ERRNO` (ibv_reg_mr(3) and the other
//!   creating verbs return NULL with `errno` set; ibv_post_send(3) and ibv_post_recv(3)
//!   return it and name the refused request in `bad_wr`);
//! - `wc=STATUS[:SELECT…]`: a send work request is accepted, then completes with `STATUS`
//!   (and the QP goes where that status sends it: RC to ERR, UC and UD to SQE), as a
//!   request the network or the responder failed would.
//!
//! `SELECT` narrows and picks the calls: `qp=QPN` (verbs on a QP, and `wc`), `wr_id=N`
//! (post verbs and `wc`), then at most one of `nth=N` (only the Nth matching call, from 1),
//! `every=N` (every Nth), `from=N` (the Nth and all after), `p=P` (each with probability
//! `P`, or `P%`, from the plan's seed). Without one, every matching call fails. For the
//! post verbs each work request counts as one call.
//!
//! Pure, as the rest of the crate: [`Decider`] counts and draws, the caller does the rest.

use core::fmt;

use crate::fault::Rng;
use crate::verbs::WcStatus;

/// A verb a plan can make fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verb {
    /// ibv_alloc_pd(3).
    AllocPd,
    /// ibv_reg_mr(3) and its variants (`ibv_reg_mr_iova`, `ibv_reg_dmabuf_mr`).
    RegMr,
    /// ibv_create_cq(3) and ibv_create_cq_ex(3).
    CreateCq,
    /// ibv_create_qp(3) and ibv_create_qp_ex(3).
    CreateQp,
    /// ibv_create_srq(3) and ibv_create_srq_ex(3).
    CreateSrq,
    /// ibv_modify_qp(3).
    ModifyQp,
    /// ibv_post_send(3), per work request.
    PostSend,
    /// ibv_post_recv(3), per work request.
    PostRecv,
    /// ibv_post_srq_recv(3), per work request.
    PostSrqRecv,
    /// ibv_create_ah(3).
    CreateAh,
}

impl Verb {
    /// Every verb, in the order of the documentation.
    pub const ALL: [Verb; 10] = [
        Verb::AllocPd,
        Verb::RegMr,
        Verb::CreateCq,
        Verb::CreateQp,
        Verb::CreateSrq,
        Verb::ModifyQp,
        Verb::PostSend,
        Verb::PostRecv,
        Verb::PostSrqRecv,
        Verb::CreateAh,
    ];

    /// The name a plan uses (`reg_mr`): the C verb without `ibv_`.
    pub const fn name(self) -> &'static str {
        match self {
            Verb::AllocPd => "alloc_pd",
            Verb::RegMr => "reg_mr",
            Verb::CreateCq => "create_cq",
            Verb::CreateQp => "create_qp",
            Verb::CreateSrq => "create_srq",
            Verb::ModifyQp => "modify_qp",
            Verb::PostSend => "post_send",
            Verb::PostRecv => "post_recv",
            Verb::PostSrqRecv => "post_srq_recv",
            Verb::CreateAh => "create_ah",
        }
    }

    /// The errors a plan may give this verb: those a verbs provider returns for it
    /// (ENOMEM for every resource; EINVAL for arguments; EFAULT for memory that cannot be
    /// reached; EACCES for access the memory does not allow; EOPNOTSUPP for a QP type or
    /// capability the device lacks). An error the real stack never returns for a verb
    /// would test an error path no application has, so the plan refuses it.
    pub const fn errnos(self) -> &'static [Errno] {
        use Errno::*;
        match self {
            Verb::AllocPd => &[Enomem],
            Verb::RegMr => &[Enomem, Einval, Efault, Eacces],
            Verb::CreateCq | Verb::CreateSrq | Verb::CreateAh => &[Enomem, Einval],
            Verb::CreateQp => &[Enomem, Einval, Eopnotsupp],
            Verb::ModifyQp => &[Einval, Enomem],
            Verb::PostSend | Verb::PostRecv => &[Enomem, Einval, Efault],
            Verb::PostSrqRecv => &[Enomem, Einval],
        }
    }

    /// Whether the verb acts on a QP (a `qp=` selector applies).
    pub const fn on_qp(self) -> bool {
        matches!(self, Verb::ModifyQp | Verb::PostSend | Verb::PostRecv)
    }

    /// Whether the verb posts work requests (a `wr_id=` selector applies).
    pub const fn posts(self) -> bool {
        matches!(self, Verb::PostSend | Verb::PostRecv | Verb::PostSrqRecv)
    }

    fn from_name(s: &str) -> Option<Verb> {
        let s = s.strip_prefix("ibv_").unwrap_or(s);
        Verb::ALL.into_iter().find(|v| v.name() == s)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ibv_{}", self.name())
    }
}

/// An error a plan can make a verb return (Linux numbers, as `errno` holds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// `ENOMEM` (12): out of memory or of a device resource.
    Enomem,
    /// `EINVAL` (22): an argument the device refuses.
    Einval,
    /// `EFAULT` (14): memory the device cannot reach.
    Efault,
    /// `EACCES` (13): access the memory does not allow.
    Eacces,
    /// `EOPNOTSUPP` (95): not supported by the device.
    Eopnotsupp,
}

impl Errno {
    const ALL: [Errno; 5] = [Errno::Enomem, Errno::Einval, Errno::Efault, Errno::Eacces, Errno::Eopnotsupp];

    /// The number (Linux).
    pub const fn number(self) -> i32 {
        match self {
            Errno::Enomem => 12,
            Errno::Einval => 22,
            Errno::Efault => 14,
            Errno::Eacces => 13,
            Errno::Eopnotsupp => 95,
        }
    }

    /// The name (`ENOMEM`).
    pub const fn name(self) -> &'static str {
        match self {
            Errno::Enomem => "ENOMEM",
            Errno::Einval => "EINVAL",
            Errno::Efault => "EFAULT",
            Errno::Eacces => "EACCES",
            Errno::Eopnotsupp => "EOPNOTSUPP",
        }
    }
}

/// The statuses a `wc=` item may complete a send work request with: the errors a
/// requester reports for a request the network, the responder or the local device failed
/// (ibv_poll_cq(3)). Not SUCCESS, and not WR_FLUSH_ERR, which follows them.
pub const WC_STATUSES: [WcStatus; 10] = [
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::RemAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemOpErr,
    WcStatus::LocProtErr,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::BadRespErr,
    WcStatus::FatalErr,
];

/// The plan's name of a status (`RETRY_EXC_ERR`, rdma-core's `IBV_WC_` suffix).
pub const fn status_name(s: WcStatus) -> &'static str {
    match s {
        WcStatus::RetryExcErr => "RETRY_EXC_ERR",
        WcStatus::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
        WcStatus::RemAccessErr => "REM_ACCESS_ERR",
        WcStatus::RemInvReqErr => "REM_INV_REQ_ERR",
        WcStatus::RemOpErr => "REM_OP_ERR",
        WcStatus::LocProtErr => "LOC_PROT_ERR",
        WcStatus::LocLenErr => "LOC_LEN_ERR",
        WcStatus::LocQpOpErr => "LOC_QP_OP_ERR",
        WcStatus::BadRespErr => "BAD_RESP_ERR",
        WcStatus::FatalErr => "FATAL_ERR",
        _ => "?",
    }
}

/// Which of the matching calls an item hits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick {
    /// Every one.
    All,
    /// Only the Nth (from 1).
    Nth(u64),
    /// Every Nth: N, 2N, 3N…
    Every(u64),
    /// The Nth and every one after it.
    From(u64),
    /// Each with this probability, drawn from the plan's seed.
    Chance(f64),
}

/// What an item does to the calls it hits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Effect {
    /// The verb returns this error.
    Fail(Verb, Errno),
    /// The send work request completes with this status.
    Complete(WcStatus),
}

/// One item of a plan: an effect, the calls it applies to, and which of them it hits.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The item as written (what the log of an injection quotes).
    pub text: String,
    /// What it does.
    pub effect: Effect,
    /// Only calls on this QP.
    pub qp: Option<u32>,
    /// Only work requests with this `wr_id`.
    pub wr_id: Option<u64>,
    /// Which matching calls.
    pub pick: Pick,
}

/// A fault plan of the verbs: its items, and the seed of its draws.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VerbPlan {
    /// Seed of the `p=` draws (`seed=` of `RVERBS_FAULTS`, shared with the packet faults).
    pub seed: u64,
    /// The items, in the order written; the first that hits a call decides it.
    pub items: Vec<Item>,
}

/// A plan item that did not parse: the item, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanParseError {
    /// The offending item.
    pub item: String,
    /// What is wrong.
    pub why: String,
}

impl fmt::Display for PlanParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad fault plan item `{}`: {}", self.item, self.why)
    }
}

impl std::error::Error for PlanParseError {}

impl VerbPlan {
    /// Whether the plan has no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The `fail=` and `wc=` items (and `seed=`) of a `RVERBS_FAULTS` spec; the packet
    /// items are left to [`crate::fault::FaultConfig::parse`], which skips these.
    ///
    /// Errors: an item of ours that does not parse — an unknown verb or status, an error
    /// the verb's man page does not give it ([`Verb::errnos`]), a selector that does not
    /// apply (`qp=` on a verb without a QP, `wr_id=` on one that posts nothing), two picks,
    /// a count of 0, a probability outside `[0, 1]`.
    pub fn parse(spec: &str) -> Result<VerbPlan, PlanParseError> {
        let mut plan = VerbPlan::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else { continue };
            match key.trim() {
                "seed" => {
                    plan.seed = value.trim().parse().map_err(|_| bad(item, "the seed is not an integer"))?;
                }
                "fail" | "wc" => plan.items.push(parse_item(item)?),
                _ => {}
            }
        }
        Ok(plan)
    }
}

/// Whether `key` names an item of a verb plan (the packet parser skips those).
pub fn is_plan_key(key: &str) -> bool {
    matches!(key.trim(), "fail" | "wc")
}

fn bad(item: &str, why: impl Into<String>) -> PlanParseError {
    PlanParseError { item: item.to_string(), why: why.into() }
}

fn parse_item(item: &str) -> Result<Item, PlanParseError> {
    let (key, value) = item.split_once('=').expect("checked by the caller");
    let mut parts = value.split(':').map(str::trim);
    let effect = if key.trim() == "fail" {
        let verb_name = parts.next().unwrap_or("");
        let verb = Verb::from_name(verb_name).ok_or_else(|| {
            let names: Vec<_> = Verb::ALL.iter().map(|v| v.name()).collect();
            bad(item, format!("unknown verb `{verb_name}` (one of {})", names.join(", ")))
        })?;
        let e = parts.next().ok_or_else(|| bad(item, "no error (fail=VERB:ERRNO)"))?;
        let errno = Errno::ALL
            .into_iter()
            .find(|x| x.name().eq_ignore_ascii_case(e))
            .filter(|x| verb.errnos().contains(x))
            .ok_or_else(|| {
                let ok: Vec<_> = verb.errnos().iter().map(|x| x.name()).collect();
                bad(item, format!("{verb} does not return `{e}` (it returns {})", ok.join(", ")))
            })?;
        Effect::Fail(verb, errno)
    } else {
        let s = parts.next().unwrap_or("");
        let want = s.to_ascii_uppercase();
        let want = want.strip_prefix("IBV_WC_").unwrap_or(&want);
        let status = WC_STATUSES
            .into_iter()
            .find(|x| status_name(*x) == want || status_name(*x).strip_suffix("_ERR") == Some(want))
            .ok_or_else(|| {
                let ok: Vec<_> = WC_STATUSES.iter().map(|x| status_name(*x)).collect();
                bad(item, format!("unknown or unusable status `{s}` (one of {})", ok.join(", ")))
            })?;
        Effect::Complete(status)
    };
    let mut out = Item { text: item.to_string(), effect, qp: None, wr_id: None, pick: Pick::All };
    let mut picked = false;
    for sel in parts {
        let (k, v) = sel.split_once('=').ok_or_else(|| bad(item, format!("selector `{sel}` is not KEY=VALUE")))?;
        let (k, v) = (k.trim(), v.trim());
        let count = || match parse_u64(v) {
            Some(n) if n > 0 => Ok(n),
            _ => Err(bad(item, format!("`{k}` needs a count from 1, not `{v}`"))),
        };
        let pick = match k {
            "qp" => {
                let applies = match effect {
                    Effect::Fail(verb, _) => verb.on_qp(),
                    Effect::Complete(_) => true,
                };
                if !applies {
                    return Err(bad(item, "qp= applies to modify_qp, post_send, post_recv and wc only"));
                }
                let n = parse_u64(v).filter(|n| *n <= 0xff_ffff).ok_or_else(|| bad(item, format!("bad QPN `{v}`")))?;
                out.qp = Some(n as u32);
                None
            }
            "wr_id" => {
                let applies = match effect {
                    Effect::Fail(verb, _) => verb.posts(),
                    Effect::Complete(_) => true,
                };
                if !applies {
                    return Err(bad(item, "wr_id= applies to the post verbs and wc only"));
                }
                out.wr_id = Some(parse_u64(v).ok_or_else(|| bad(item, format!("bad wr_id `{v}`")))?);
                None
            }
            "nth" => Some(Pick::Nth(count()?)),
            "every" => Some(Pick::Every(count()?)),
            "from" => Some(Pick::From(count()?)),
            "p" => Some(Pick::Chance(probability(v).ok_or_else(|| bad(item, format!("bad probability `{v}`")))?)),
            _ => return Err(bad(item, format!("unknown selector `{k}` (qp, wr_id, nth, every, from, p)"))),
        };
        if let Some(p) = pick {
            if picked {
                return Err(bad(item, "at most one of nth, every, from, p"));
            }
            picked = true;
            out.pick = p;
        }
    }
    Ok(out)
}

fn parse_u64(v: &str) -> Option<u64> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

fn probability(v: &str) -> Option<f64> {
    let p = match v.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().ok()? / 100.0,
        None => v.parse::<f64>().ok()?,
    };
    (0.0..=1.0).contains(&p).then_some(p)
}

/// What a plan did to one call: which item, the how-manyth matching call it was, and the
/// effect (what the log of the injection and the Rust caller's list hold).
#[derive(Clone, Debug, PartialEq)]
pub struct Injection {
    /// The item as written.
    pub item: String,
    /// The effect.
    pub effect: Effect,
    /// The matching call's number for that item (from 1).
    pub call: u64,
    /// The QP of the call, if it has one.
    pub qp: Option<u32>,
    /// The work request's `wr_id`, for the post verbs and `wc`.
    pub wr_id: Option<u64>,
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.effect {
            Effect::Fail(verb, e) => write!(f, "{verb} fails with {}", e.name())?,
            Effect::Complete(s) => write!(f, "send work request completes with {} ({s})", status_name(s))?,
        }
        if let Some(q) = self.qp {
            write!(f, ", QP {q:#x}")?;
        }
        if let Some(w) = self.wr_id {
            write!(f, ", wr_id {w:#x}")?;
        }
        write!(f, " (matching call {} of item `{}`)", self.call, self.item)
    }
}

/// A plan at work: counts the calls each item matches and draws its chances, in call
/// order, so the same plan, seed and call sequence give the same injections.
#[derive(Clone, Debug)]
pub struct Decider {
    plan: VerbPlan,
    counts: Vec<u64>,
    rng: Rng,
}

impl Decider {
    /// A decider for `plan`, no call seen yet.
    pub fn new(plan: VerbPlan) -> Decider {
        let counts = vec![0; plan.items.len()];
        // Not the packet injector's sequence: the two sides draw independently.
        let rng = Rng::new(plan.seed ^ 0x7665_7262_5f70_6c61);
        Decider { plan, counts, rng }
    }

    /// The plan.
    pub fn plan(&self) -> &VerbPlan {
        &self.plan
    }

    /// A call of `verb` (on QP `qp`; for the post verbs, one work request `wr_id`): the
    /// error to return, if an item hits it.
    pub fn fail(&mut self, verb: Verb, qp: Option<u32>, wr_id: Option<u64>) -> Option<Injection> {
        self.decide(|e| matches!(e, Effect::Fail(v, _) if v == verb), qp, wr_id)
    }

    /// A send work request `wr_id` accepted on QP `qp`: the status it completes with, if
    /// an item hits it.
    pub fn complete(&mut self, qp: u32, wr_id: u64) -> Option<Injection> {
        self.decide(|e| matches!(e, Effect::Complete(_)), Some(qp), Some(wr_id))
    }

    fn decide(&mut self, kind: impl Fn(Effect) -> bool, qp: Option<u32>, wr_id: Option<u64>) -> Option<Injection> {
        for (i, item) in self.plan.items.iter().enumerate() {
            if !kind(item.effect) || item.qp.is_some_and(|q| Some(q) != qp) || item.wr_id.is_some_and(|w| Some(w) != wr_id) {
                continue;
            }
            self.counts[i] += 1;
            let n = self.counts[i];
            let hit = match item.pick {
                Pick::All => true,
                Pick::Nth(k) => n == k,
                Pick::Every(k) => n.is_multiple_of(k),
                Pick::From(k) => n >= k,
                Pick::Chance(p) => self.rng.chance(p),
            };
            if hit {
                return Some(Injection { item: item.text.clone(), effect: item.effect, call: n, qp, wr_id });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_parse_with_their_selectors_and_packet_items_are_left_alone() {
        let p = VerbPlan::parse("seed=9, drop=1%, fail=reg_mr:ENOMEM:nth=3, wc=RETRY_EXC:qp=0x11:every=2, fail=ibv_post_send:einval:wr_id=7:p=50%").unwrap();
        assert_eq!(p.seed, 9);
        assert_eq!(p.items.len(), 3);
        assert_eq!(p.items[0].effect, Effect::Fail(Verb::RegMr, Errno::Enomem));
        assert_eq!(p.items[0].pick, Pick::Nth(3));
        assert_eq!(p.items[1].effect, Effect::Complete(WcStatus::RetryExcErr));
        assert_eq!((p.items[1].qp, p.items[1].pick), (Some(0x11), Pick::Every(2)));
        assert_eq!(p.items[2].effect, Effect::Fail(Verb::PostSend, Errno::Einval));
        assert_eq!((p.items[2].wr_id, p.items[2].pick), (Some(7), Pick::Chance(0.5)));
        assert!(VerbPlan::parse("drop=5%,delay=1ms").unwrap().is_empty());
        // And the packet parser leaves ours alone.
        let packets = crate::fault::FaultConfig::parse("seed=3,fail=reg_mr:ENOMEM,drop=1%,wc=REM_OP").unwrap();
        assert_eq!((packets.seed, packets.drop), (3, 0.01));
    }

    #[test]
    fn items_the_real_stack_cannot_produce_are_refused_with_the_reason() {
        let why = |s: &str| VerbPlan::parse(s).unwrap_err().why;
        assert!(why("fail=reg_mr:EOPNOTSUPP").contains("returns ENOMEM, EINVAL, EFAULT, EACCES"));
        assert!(why("fail=alloc_pd:EINVAL").contains("ibv_alloc_pd does not return"));
        assert!(why("fail=frobnicate:ENOMEM").contains("unknown verb"));
        assert!(why("fail=reg_mr").contains("no error"));
        assert!(why("wc=SUCCESS").contains("unusable status"));
        assert!(why("wc=WR_FLUSH_ERR").contains("unusable status"));
        assert!(why("fail=reg_mr:ENOMEM:qp=3").contains("qp= applies"));
        assert!(why("fail=create_cq:ENOMEM:wr_id=3").contains("wr_id= applies"));
        assert!(why("fail=reg_mr:ENOMEM:nth=0").contains("count from 1"));
        assert!(why("fail=reg_mr:ENOMEM:nth=1:every=2").contains("at most one"));
        assert!(why("fail=reg_mr:ENOMEM:p=2").contains("probability"));
        assert!(why("wc=REM_ACCESS:qp=0x1000000").contains("QPN"));
        assert!(why("fail=reg_mr:ENOMEM:when=now").contains("unknown selector"));
        assert!(why("seed=x").contains("seed"));
    }

    #[test]
    fn picks_hit_the_calls_they_name_counting_only_matching_calls() {
        let plan = |s| Decider::new(VerbPlan::parse(s).unwrap());
        let hits = |d: &mut Decider, verb, qp| (1..=6).filter(|_| d.fail(verb, qp, None).is_some()).count();
        let mut d = plan("fail=reg_mr:ENOMEM:nth=3");
        let got: Vec<_> = (0..5).map(|_| d.fail(Verb::RegMr, None, None).map(|i| i.call)).collect();
        assert_eq!(got, [None, None, Some(3), None, None]);
        assert_eq!(hits(&mut plan("fail=reg_mr:ENOMEM:every=2"), Verb::RegMr, None), 3);
        assert_eq!(hits(&mut plan("fail=reg_mr:ENOMEM:from=5"), Verb::RegMr, None), 2);
        assert_eq!(hits(&mut plan("fail=reg_mr:ENOMEM"), Verb::RegMr, None), 6);
        // Another verb, or another QP, neither hits nor counts.
        let mut d = plan("fail=modify_qp:EINVAL:qp=5:nth=2");
        assert!(d.fail(Verb::ModifyQp, Some(4), None).is_none());
        assert!(d.fail(Verb::RegMr, None, None).is_none());
        assert!(d.fail(Verb::ModifyQp, Some(5), None).is_none());
        assert_eq!(d.fail(Verb::ModifyQp, Some(5), None).map(|i| i.call), Some(2));
        // wc items and fail items are separate.
        let mut d = plan("wc=REM_ACCESS:wr_id=9");
        assert!(d.fail(Verb::PostSend, Some(1), Some(9)).is_none());
        assert!(d.complete(1, 8).is_none());
        let i = d.complete(1, 9).unwrap();
        assert_eq!((i.effect, i.qp, i.wr_id), (Effect::Complete(WcStatus::RemAccessErr), Some(1), Some(9)));
        assert!(i.to_string().contains("REM_ACCESS_ERR"), "{i}");
    }

    #[test]
    fn chances_reproduce_from_the_seed() {
        let run = |seed: u64| {
            let mut d = Decider::new(VerbPlan::parse(&format!("seed={seed},fail=post_send:ENOMEM:p=30%")).unwrap());
            (0..200).map(|w| d.fail(Verb::PostSend, Some(1), Some(w)).is_some()).collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        let n = a.iter().filter(|h| **h).count();
        assert!((30..=90).contains(&n), "{n} of 200 at 30 %");
    }
}
