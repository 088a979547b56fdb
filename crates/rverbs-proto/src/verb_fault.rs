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
//!   request the network or the responder failed would;
//! - `event=EVENT[:on=VERB][:SELECT…]`: the call succeeds, then the device raises `EVENT`;
//! - `wc_delay=MS[:SELECT…]`: a send work request's completion is held back `MS`
//!   milliseconds before it can be polled (later completions of its CQ wait behind it).
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
    /// rdma_resolve_addr(3): the call succeeds and ADDR_ERROR follows.
    ResolveAddr,
    /// rdma_resolve_route(3): the call succeeds and ROUTE_ERROR follows.
    ResolveRoute,
    /// rdma_connect(3): the call succeeds and UNREACHABLE or REJECTED follows.
    Connect,
    /// ibv_open_device(3).
    OpenDevice,
}

impl Verb {
    /// Every verb, in the order of the documentation.
    pub const ALL: [Verb; 14] = [
        Verb::OpenDevice,
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
        Verb::ResolveAddr,
        Verb::ResolveRoute,
        Verb::Connect,
    ];

    /// The name a plan uses (`reg_mr`): the C verb without `ibv_` or `rdma_`.
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
            Verb::ResolveAddr => "resolve_addr",
            Verb::ResolveRoute => "resolve_route",
            Verb::Connect => "connect",
            Verb::OpenDevice => "open_device",
        }
    }

    /// Whether the verb is an rdma_cm call (`rdma_` prefix; it reports failures as
    /// events, rdma_get_cm_event(3)).
    pub const fn is_cm(self) -> bool {
        matches!(self, Verb::ResolveAddr | Verb::ResolveRoute | Verb::Connect)
    }

    /// The errors a plan may give this verb: those a verbs provider returns for it
    /// (ENOMEM for every resource; EINVAL for arguments; EFAULT for memory that cannot be
    /// reached; EACCES for access the memory does not allow; EOPNOTSUPP for a QP type or
    /// capability the device lacks). An error the real stack never returns for a verb
    /// would test an error path no application has, so the plan refuses it.
    pub const fn errnos(self) -> &'static [Errno] {
        use Errno::*;
        match self {
            Verb::AllocPd | Verb::OpenDevice => &[Enomem],
            Verb::RegMr => &[Enomem, Einval, Efault, Eacces],
            Verb::CreateCq | Verb::CreateSrq | Verb::CreateAh => &[Enomem, Einval],
            Verb::CreateQp => &[Enomem, Einval, Eopnotsupp],
            Verb::ModifyQp => &[Einval, Enomem],
            Verb::PostSend | Verb::PostRecv => &[Enomem, Einval, Efault],
            Verb::PostSrqRecv => &[Enomem, Einval],
            // rdma_resolve_addr(3): the next hop does not answer, or there is none.
            Verb::ResolveAddr => &[Etimedout, Ehostunreach],
            // rdma_resolve_route(3): the kernel's rdma_cm reports a timeout.
            Verb::ResolveRoute => &[Etimedout],
            // rdma_connect(3): no answer (UNREACHABLE) or a refusal (REJECTED).
            Verb::Connect => &[Etimedout, Econnrefused],
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
        let s = s.strip_prefix("ibv_").or_else(|| s.strip_prefix("rdma_")).unwrap_or(s);
        Verb::ALL.into_iter().find(|v| v.name() == s)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.is_cm() { "rdma" } else { "ibv" };
        write!(f, "{prefix}_{}", self.name())
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
    /// `ETIMEDOUT` (110): no answer in time (rdma_cm's address, route and connect events).
    Etimedout,
    /// `EHOSTUNREACH` (113): no route to the host (rdma_cm's ADDR_ERROR).
    Ehostunreach,
    /// `ECONNREFUSED` (111): the peer refused the connection (rdma_cm's REJECTED).
    Econnrefused,
}

impl Errno {
    const ALL: [Errno; 8] = [
        Errno::Enomem,
        Errno::Einval,
        Errno::Efault,
        Errno::Eacces,
        Errno::Eopnotsupp,
        Errno::Etimedout,
        Errno::Ehostunreach,
        Errno::Econnrefused,
    ];

    /// The number (Linux).
    pub const fn number(self) -> i32 {
        match self {
            Errno::Enomem => 12,
            Errno::Einval => 22,
            Errno::Efault => 14,
            Errno::Eacces => 13,
            Errno::Eopnotsupp => 95,
            Errno::Etimedout => 110,
            Errno::Ehostunreach => 113,
            Errno::Econnrefused => 111,
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
            Errno::Etimedout => "ETIMEDOUT",
            Errno::Ehostunreach => "EHOSTUNREACH",
            Errno::Econnrefused => "ECONNREFUSED",
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

/// An event an `event=` item makes the device raise (ibv_get_async_event(3); for
/// DISCONNECTED, rdma_get_cm_event(3)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// IBV_EVENT_QP_FATAL: the QP enters ERR, its work requests flush.
    QpFatal,
    /// IBV_EVENT_QP_REQ_ERR: the QP enters ERR (an invalid request it received).
    QpReqErr,
    /// IBV_EVENT_QP_ACCESS_ERR: the QP enters ERR (an access violation it received).
    QpAccessErr,
    /// IBV_EVENT_CQ_ERR: a CQ of the QP enters error, as after an overrun.
    CqErr,
    /// IBV_EVENT_SRQ_LIMIT_REACHED: an armed SRQ reports its limit, and is disarmed.
    SrqLimitReached,
    /// RDMA_CM_EVENT_DISCONNECTED: the QP's rdma_cm connection is disconnected, both
    /// sides get the event, the QP enters ERR.
    Disconnected,
    /// IBV_EVENT_PORT_ERR: port 1 of the process's view of the device goes DOWN; what
    /// the process sends does not leave, what arrives for it is dropped.
    PortErr,
    /// IBV_EVENT_PORT_ACTIVE: port 1 is ACTIVE again, traffic flows.
    PortActive,
    /// IBV_EVENT_DEVICE_FATAL: the device is dead for the process: its QPs enter ERR
    /// and flush, later creating and posting verbs fail with EIO.
    DeviceFatal,
}

impl Event {
    /// Every event, in the order of the documentation.
    pub const ALL: [Event; 9] = [
        Event::QpFatal,
        Event::QpReqErr,
        Event::QpAccessErr,
        Event::CqErr,
        Event::SrqLimitReached,
        Event::Disconnected,
        Event::PortErr,
        Event::PortActive,
        Event::DeviceFatal,
    ];

    /// The name a plan uses (`QP_FATAL`): the C constant without `IBV_EVENT_` or
    /// `RDMA_CM_EVENT_`.
    pub const fn name(self) -> &'static str {
        match self {
            Event::QpFatal => "QP_FATAL",
            Event::QpReqErr => "QP_REQ_ERR",
            Event::QpAccessErr => "QP_ACCESS_ERR",
            Event::CqErr => "CQ_ERR",
            Event::SrqLimitReached => "SRQ_LIMIT_REACHED",
            Event::Disconnected => "DISCONNECTED",
            Event::PortErr => "PORT_ERR",
            Event::PortActive => "PORT_ACTIVE",
            Event::DeviceFatal => "DEVICE_FATAL",
        }
    }

    /// The verbs whose calls may raise the event (the first is the default of `on=`): a
    /// verb on a QP for the events of a QP, its CQs and its connection; ibv_post_srq_recv
    /// for the SRQ's; for the device's events (port, fatal) those and ibv_open_device,
    /// so that a program that only queries the device meets them.
    pub const fn verbs(self) -> &'static [Verb] {
        match self {
            Event::SrqLimitReached => &[Verb::PostSrqRecv],
            Event::PortErr | Event::PortActive | Event::DeviceFatal => {
                &[Verb::PostSend, Verb::PostRecv, Verb::ModifyQp, Verb::OpenDevice]
            }
            _ => &[Verb::PostSend, Verb::PostRecv, Verb::ModifyQp],
        }
    }

    /// Whether the event is about the device (a port, or the whole device) rather than
    /// one of its objects: every open context of the device in the process gets it.
    pub const fn is_device(self) -> bool {
        matches!(self, Event::PortErr | Event::PortActive | Event::DeviceFatal)
    }

    fn from_name(s: &str) -> Option<Event> {
        let up = s.to_ascii_uppercase();
        let up = up.strip_prefix("IBV_EVENT_").or_else(|| up.strip_prefix("RDMA_CM_EVENT_")).unwrap_or(&up);
        Event::ALL.into_iter().find(|e| e.name() == up)
    }
}

/// The longest hold of a `wc_delay=` item, in milliseconds (a minute: far beyond any
/// completion an application waits for without a timeout of its own).
pub const MAX_HOLD_MS: u32 = 60_000;

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
    /// The call of this verb succeeds, then the device raises this event.
    Raise(Event, Verb),
    /// The send work request's completion is held back this many milliseconds.
    Hold(u32),
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

    /// The `fail=`, `wc=`, `wc_delay=` and `event=` items (and `seed=`) of a `RVERBS_FAULTS` spec; the packet
    /// items are left to [`crate::fault::FaultConfig::parse`], which skips these.
    ///
    /// Errors: an item of ours that does not parse — an unknown verb or status, an error
    /// the verb's man page does not give it ([`Verb::errnos`]), a selector that does not
    /// apply (`qp=` on a verb without a QP, `wr_id=` on one that posts nothing), an event
    /// `on=` a verb that cannot raise it ([`Event::verbs`]), two picks,
    /// a count of 0, a probability outside `[0, 1]`.
    pub fn parse(spec: &str) -> Result<VerbPlan, PlanParseError> {
        let mut plan = VerbPlan::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else { continue };
            match key.trim() {
                "seed" => {
                    plan.seed = value.trim().parse().map_err(|_| bad(item, "the seed is not an integer"))?;
                }
                k if crate::fault::is_verb_plan_key(k) => plan.items.push(parse_item(item)?),
                _ => {}
            }
        }
        Ok(plan)
    }
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
    } else if key.trim() == "wc_delay" {
        let v = parts.next().unwrap_or("");
        let ms = v.strip_suffix("ms").unwrap_or(v).trim();
        let ms = ms.parse::<u32>().ok().filter(|m| (1..=MAX_HOLD_MS).contains(m)).ok_or_else(|| {
            bad(item, format!("`{v}` is not a delay in milliseconds from 1 to {MAX_HOLD_MS} (wc_delay=MS)"))
        })?;
        Effect::Hold(ms)
    } else if key.trim() == "event" {
        let e = parts.next().unwrap_or("");
        let event = Event::from_name(e).ok_or_else(|| {
            let ok: Vec<_> = Event::ALL.iter().map(|x| x.name()).collect();
            bad(item, format!("unknown or unusable event `{e}` (one of {})", ok.join(", ")))
        })?;
        Effect::Raise(event, event.verbs()[0])
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
    // `on=` first: what `qp=` and `wr_id=` apply to depends on the verb.
    let parts: Vec<&str> = parts.collect();
    for sel in &parts {
        let Some(v) = sel.split_once('=').filter(|(k, _)| k.trim() == "on").map(|(_, v)| v.trim()) else { continue };
        let Effect::Raise(event, _) = out.effect else {
            return Err(bad(item, "on= applies to event items only"));
        };
        let verb = Verb::from_name(v).filter(|x| event.verbs().contains(x)).ok_or_else(|| {
            let ok: Vec<_> = event.verbs().iter().map(|x| x.name()).collect();
            bad(item, format!("{} is not raised on `{v}` (on= one of {})", event.name(), ok.join(", ")))
        })?;
        out.effect = Effect::Raise(event, verb);
    }
    let effect = out.effect;
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
                    Effect::Fail(verb, _) | Effect::Raise(_, verb) => verb.on_qp(),
                    Effect::Complete(_) | Effect::Hold(_) => true,
                };
                if !applies {
                    return Err(bad(item, "qp= applies to modify_qp, post_send, post_recv, wc and events on them only"));
                }
                let n = parse_u64(v).filter(|n| *n <= 0xff_ffff).ok_or_else(|| bad(item, format!("bad QPN `{v}`")))?;
                out.qp = Some(n as u32);
                None
            }
            "wr_id" => {
                let applies = match effect {
                    Effect::Fail(verb, _) | Effect::Raise(_, verb) => verb.posts(),
                    Effect::Complete(_) | Effect::Hold(_) => true,
                };
                if !applies {
                    return Err(bad(item, "wr_id= applies to the post verbs, wc and events on them only"));
                }
                out.wr_id = Some(parse_u64(v).ok_or_else(|| bad(item, format!("bad wr_id `{v}`")))?);
                None
            }
            "nth" => Some(Pick::Nth(count()?)),
            "every" => Some(Pick::Every(count()?)),
            "from" => Some(Pick::From(count()?)),
            "p" => Some(Pick::Chance(probability(v).ok_or_else(|| bad(item, format!("bad probability `{v}`")))?)),
            "on" => None,
            _ => return Err(bad(item, format!("unknown selector `{k}` (on, qp, wr_id, nth, every, from, p)"))),
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
            Effect::Fail(verb, e) if verb.is_cm() => write!(f, "{verb} ends with {} ({})", cm_event_name(verb, e), e.name())?,
            Effect::Fail(verb, e) => write!(f, "{verb} fails with {}", e.name())?,
            Effect::Complete(s) => write!(f, "send work request completes with {} ({s})", status_name(s))?,
            Effect::Raise(Event::Disconnected, verb) => write!(f, "RDMA_CM_EVENT_DISCONNECTED after {verb}")?,
            Effect::Raise(ev, verb) => write!(f, "IBV_EVENT_{} after {verb}", ev.name())?,
            Effect::Hold(ms) => write!(f, "send work request's completion held back {ms} ms")?,
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

/// The rdma_cm event an rdma_cm call failed by the plan ends with (rdma_get_cm_event(3)):
/// ADDR_ERROR, ROUTE_ERROR; for rdma_connect, UNREACHABLE for a timeout and REJECTED for
/// a refusal.
pub const fn cm_event_name(verb: Verb, errno: Errno) -> &'static str {
    match (verb, errno) {
        (Verb::ResolveAddr, _) => "RDMA_CM_EVENT_ADDR_ERROR",
        (Verb::ResolveRoute, _) => "RDMA_CM_EVENT_ROUTE_ERROR",
        (Verb::Connect, Errno::Econnrefused) => "RDMA_CM_EVENT_REJECTED",
        (Verb::Connect, _) => "RDMA_CM_EVENT_UNREACHABLE",
        _ => "?",
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

    /// A send work request `wr_id` accepted on QP `qp`: how long its completion is held
    /// back, if an item hits it.
    pub fn hold(&mut self, qp: u32, wr_id: u64) -> Option<Injection> {
        self.decide(|e| matches!(e, Effect::Hold(_)), Some(qp), Some(wr_id))
    }

    /// A call of `verb` that succeeded (on QP `qp`; for the post verbs, one work request
    /// `wr_id` it posted): the event the device raises after it, if an item hits it.
    pub fn raise(&mut self, verb: Verb, qp: Option<u32>, wr_id: Option<u64>) -> Option<Injection> {
        self.decide(|e| matches!(e, Effect::Raise(_, v) if v == verb), qp, wr_id)
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
    fn event_items_parse_with_their_verb_and_selectors() {
        let p = VerbPlan::parse(
            "event=QP_FATAL:qp=0x12:nth=3, event=IBV_EVENT_CQ_ERR:on=post_recv, event=srq_limit_reached:every=2, \
             event=RDMA_CM_EVENT_DISCONNECTED:on=ibv_post_send:wr_id=5, event=QP_ACCESS_ERR:on=modify_qp:from=2",
        )
        .unwrap();
        let effects: Vec<_> = p.items.iter().map(|i| i.effect).collect();
        assert_eq!(
            effects,
            [
                Effect::Raise(Event::QpFatal, Verb::PostSend),
                Effect::Raise(Event::CqErr, Verb::PostRecv),
                Effect::Raise(Event::SrqLimitReached, Verb::PostSrqRecv),
                Effect::Raise(Event::Disconnected, Verb::PostSend),
                Effect::Raise(Event::QpAccessErr, Verb::ModifyQp),
            ]
        );
        assert_eq!((p.items[0].qp, p.items[0].pick), (Some(0x12), Pick::Nth(3)));
        assert_eq!(p.items[2].pick, Pick::Every(2));
        assert_eq!(p.items[3].wr_id, Some(5));
        assert_eq!(p.items[4].pick, Pick::From(2));
        // The packet parser leaves them alone.
        assert_eq!(crate::fault::FaultConfig::parse("event=QP_FATAL,drop=1%").unwrap().drop, 0.01);
    }

    #[test]
    fn device_event_items_parse_on_the_qp_verbs_and_open_device() {
        let p = VerbPlan::parse("event=PORT_ERR:on=open_device, event=IBV_EVENT_PORT_ACTIVE:on=post_recv:nth=2, event=device_fatal:qp=0x21, fail=open_device:ENOMEM")
            .unwrap();
        let effects: Vec<_> = p.items.iter().map(|i| i.effect).collect();
        assert_eq!(
            effects,
            [
                Effect::Raise(Event::PortErr, Verb::OpenDevice),
                Effect::Raise(Event::PortActive, Verb::PostRecv),
                Effect::Raise(Event::DeviceFatal, Verb::PostSend),
                Effect::Fail(Verb::OpenDevice, Errno::Enomem),
            ]
        );
        assert_eq!(p.items[2].qp, Some(0x21));
        assert!(Event::ALL.iter().filter(|e| e.is_device()).eq([Event::PortErr, Event::PortActive, Event::DeviceFatal].iter()));
        let mut d = Decider::new(p);
        let i = d.raise(Verb::OpenDevice, None, None).unwrap();
        assert_eq!(i.to_string(), "IBV_EVENT_PORT_ERR after ibv_open_device (matching call 1 of item `event=PORT_ERR:on=open_device`)");
    }

    #[test]
    fn delay_items_hold_chosen_completions_and_count_apart_from_wc_items() {
        let p = VerbPlan::parse("wc_delay=250:qp=0x12:nth=2, wc_delay=5ms, wc=REM_OP").unwrap();
        assert_eq!(p.items[0].effect, Effect::Hold(250));
        assert_eq!((p.items[0].qp, p.items[0].pick), (Some(0x12), Pick::Nth(2)));
        assert_eq!(p.items[1].effect, Effect::Hold(5));
        let mut d = Decider::new(p);
        assert!(d.complete(0x12, 1).is_some(), "wc items are decided apart");
        // The first call is counted by the first item (not its 2nd) and hit by the second.
        assert_eq!(d.hold(0x12, 1).map(|i| i.effect), Some(Effect::Hold(5)));
        let i = d.hold(0x12, 2).unwrap();
        assert_eq!((i.effect, i.call), (Effect::Hold(250), 2));
        assert!(i.to_string().starts_with("send work request's completion held back 250 ms, QP 0x12, wr_id 0x2"), "{i}");
        let why = |s: &str| VerbPlan::parse(s).unwrap_err().why;
        assert!(why("wc_delay=0").contains("from 1 to 60000"));
        assert!(why("wc_delay=60001").contains("from 1 to 60000"));
        assert!(why("wc_delay=1s").contains("milliseconds"));
        assert!(why("wc_delay=5:on=post_send").contains("on= applies to event items only"));
        // The packet parser leaves it alone, and keeps its own `delay`.
        let packets = crate::fault::FaultConfig::parse("wc_delay=5,delay=1ms").unwrap();
        assert_eq!(packets.delay, core::time::Duration::from_millis(1));
    }

    #[test]
    fn cm_items_parse_as_failures_of_the_rdma_cm_calls() {
        let p = VerbPlan::parse("fail=resolve_route:ETIMEDOUT, fail=rdma_resolve_addr:EHOSTUNREACH:nth=2, fail=connect:ECONNREFUSED").unwrap();
        let effects: Vec<_> = p.items.iter().map(|i| i.effect).collect();
        assert_eq!(
            effects,
            [
                Effect::Fail(Verb::ResolveRoute, Errno::Etimedout),
                Effect::Fail(Verb::ResolveAddr, Errno::Ehostunreach),
                Effect::Fail(Verb::Connect, Errno::Econnrefused),
            ]
        );
        let mut d = Decider::new(p);
        let i = d.fail(Verb::ResolveRoute, None, None).unwrap();
        assert_eq!(i.to_string(), "rdma_resolve_route ends with RDMA_CM_EVENT_ROUTE_ERROR (ETIMEDOUT) (matching call 1 of item `fail=resolve_route:ETIMEDOUT`)");
        assert!(d.fail(Verb::Connect, None, None).unwrap().to_string().contains("RDMA_CM_EVENT_REJECTED"));
        assert_eq!(cm_event_name(Verb::Connect, Errno::Etimedout), "RDMA_CM_EVENT_UNREACHABLE");
        assert_eq!(cm_event_name(Verb::ResolveAddr, Errno::Etimedout), "RDMA_CM_EVENT_ADDR_ERROR");
        assert_eq!(Errno::Etimedout.number(), 110);
    }

    #[test]
    fn event_and_cm_items_the_stack_cannot_produce_are_refused_with_the_reason() {
        let why = |s: &str| VerbPlan::parse(s).unwrap_err().why;
        assert!(why("event=SRQ_ERR").contains("unknown or unusable event"));
        assert!(why("event=SM_CHANGE").contains("unknown or unusable event"));
        assert!(why("event=PORT_ERR:on=post_srq_recv").contains("on= one of post_send, post_recv, modify_qp, open_device"));
        assert!(why("event=DEVICE_FATAL:on=open_device:qp=3").contains("qp= applies"));
        assert!(why("fail=open_device:EINVAL").contains("ibv_open_device does not return"));
        assert!(why("event=COMM_EST").contains("unknown or unusable event"));
        assert!(why("event=SRQ_LIMIT_REACHED:on=post_send").contains("not raised on `post_send`"));
        assert!(why("event=QP_FATAL:on=reg_mr").contains("on= one of post_send, post_recv, modify_qp"));
        assert!(why("event=QP_FATAL:on=frobnicate").contains("not raised on"));
        assert!(why("event=SRQ_LIMIT_REACHED:qp=3").contains("qp= applies"));
        assert!(why("event=QP_FATAL:on=modify_qp:wr_id=3").contains("wr_id= applies"));
        assert!(why("event=QP_FATAL:nth=1:p=5%").contains("at most one"));
        assert!(why("fail=reg_mr:ENOMEM:on=post_send").contains("on= applies to event items only"));
        assert!(why("fail=resolve_route:ENOMEM").contains("rdma_resolve_route does not return `ENOMEM` (it returns ETIMEDOUT)"));
        assert!(why("fail=connect:EHOSTUNREACH").contains("it returns ETIMEDOUT, ECONNREFUSED"));
        assert!(why("fail=post_send:ETIMEDOUT").contains("ibv_post_send does not return"));
        assert!(why("fail=connect:ETIMEDOUT:qp=1").contains("qp= applies"));
    }

    #[test]
    fn events_count_only_successful_calls_of_their_verb() {
        let mut d = Decider::new(VerbPlan::parse("event=QP_FATAL:qp=7:nth=2,event=SRQ_LIMIT_REACHED").unwrap());
        // Failures and completions are other kinds: they neither hit nor count.
        assert!(d.fail(Verb::PostSend, Some(7), Some(1)).is_none());
        assert!(d.complete(7, 1).is_none());
        assert!(d.raise(Verb::PostRecv, Some(7), Some(1)).is_none());
        assert!(d.raise(Verb::PostSend, Some(8), Some(1)).is_none());
        assert!(d.raise(Verb::PostSend, Some(7), Some(1)).is_none());
        let i = d.raise(Verb::PostSend, Some(7), Some(2)).unwrap();
        assert_eq!((i.effect, i.call, i.qp, i.wr_id), (Effect::Raise(Event::QpFatal, Verb::PostSend), 2, Some(7), Some(2)));
        assert_eq!(i.to_string(), "IBV_EVENT_QP_FATAL after ibv_post_send, QP 0x7, wr_id 0x2 (matching call 2 of item `event=QP_FATAL:qp=7:nth=2`)");
        assert!(d.raise(Verb::PostSend, Some(7), Some(3)).is_none());
        let s = d.raise(Verb::PostSrqRecv, None, Some(4)).unwrap();
        assert_eq!(s.effect, Effect::Raise(Event::SrqLimitReached, Verb::PostSrqRecv));
        let mut d = Decider::new(VerbPlan::parse("event=DISCONNECTED:on=post_recv").unwrap());
        assert!(d.raise(Verb::PostRecv, Some(1), Some(0)).unwrap().to_string().starts_with("RDMA_CM_EVENT_DISCONNECTED after ibv_post_recv"));
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
