//! One stream rsocket: the connection (over the rdma_cm functions of this library) and
//! the data protocol of docs/rsockets.md (over the verbs of `libibverbs.so.1`).
//!
//! Every method runs under the socket's lock and never blocks: the blocking calls in
//! `mod.rs` release the lock and wait in `poll(2)` on [`Rs::wait_fds`].

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use super::abi::{self, CmEvent, CmId, CompChannel, ConnParam, Cq, EventChannel, Mr, Qp, RecvWr, SendWr, Sge as IbSge, Wc};
use super::wire::{self, ctrl, op, ConnData, Sge};
use crate::forward as cm;

/// Bytes below which a send waits for completions (`RS_SNDLOWAT`).
pub const SNDLOWAT: u32 = 2048;
/// First transfer size of a send, doubled up to [`MAX_TRANSFER`] (`RS_OLAP_START_SIZE`).
const OLAP_START: u32 = 2048;
const MAX_TRANSFER: u32 = 65536;
/// Send queue entries kept for control messages (`RS_QP_CTRL_SIZE`).
const CTRL_SIZE: u32 = 4;
const QP_MIN: u16 = 16;
const QP_MAX: u16 = 0xFFFE;

/// rdma-core's defaults (`def_inline`, `def_sqsize`, `def_rqsize`, `def_mem`, `def_wmem`).
pub const DEF_INLINE: u16 = 64;
pub const DEF_SQSIZE: u16 = 384;
pub const DEF_RQSIZE: u16 = 384;
pub const DEF_MEM: u32 = 1 << 17;

/// Socket states, ordered passive, connecting, connected, disconnected (`enum rs_state`).
pub mod st {
    pub const INIT: u32 = 0;
    pub const BOUND: u32 = 0x1;
    pub const LISTENING: u32 = 0x2;
    pub const OPENING: u32 = 0x4;
    pub const RESOLVING_ADDR: u32 = OPENING | 0x10;
    pub const RESOLVING_ROUTE: u32 = OPENING | 0x20;
    pub const CONNECTING: u32 = OPENING | 0x40;
    pub const CONNECTED: u32 = 0x100;
    pub const WRITABLE: u32 = 0x200;
    pub const READABLE: u32 = 0x400;
    pub const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
    pub const CONNECT_ERROR: u32 = 0x800;
    pub const DISCONNECTED: u32 = 0x1000;
    pub const ERROR: u32 = 0x2000;
}

/// A registered buffer we own.
struct Buf {
    mem: *mut u8,

    mr: *mut Mr,
}

impl Buf {
    fn new(pd: *mut c_void, len: usize, access: c_int) -> Result<Buf, c_int> {
        // SAFETY: plain allocation, freed in `free`.
        let mem = unsafe { libc::calloc(len.max(1), 1) }.cast::<u8>();
        if mem.is_null() {
            return Err(libc::ENOMEM);
        }
        match abi::reg_mr(pd, mem, len, access) {
            Ok(mr) => Ok(Buf { mem, mr }),
            Err(e) => {
                // SAFETY: allocated above.
                unsafe { libc::free(mem.cast()) };
                Err(e)
            }
        }
    }
    fn addr(&self) -> u64 {
        self.mem as u64
    }
    // SAFETY (for callers): `mr` stays valid until `free`.
    fn lkey(&self) -> u32 {
        // SAFETY: live registration.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: live registration.
        unsafe { (*self.mr).rkey }
    }
    fn free(&mut self) {
        if !self.mem.is_null() {
            abi::dereg_mr(self.mr);
            // SAFETY: allocated in `new`, no longer registered.
            unsafe { libc::free(self.mem.cast()) };
            self.mem = null_mut();
        }
    }
}

/// A local mapping of `riomap` (`struct rs_iomap_mr`).
pub struct IoMap {
    pub offset: u64,
    pub mr: *mut Mr,
    /// Slot in the peer's iomap table, or `None` for a local-only (not writable) mapping.
    pub index: Option<usize>,
    /// Not yet written to the peer.
    pub pending: bool,
}

/// A stream rsocket.
pub struct Rs {
    pub channel: *mut EventChannel,
    pub id: *mut CmId,
    pub state: u32,
    pub err: c_int,
    pub fs_flags: c_int,
    pub fd_flags: c_int,
    pub so_opts: u64,
    pub tcp_opts: u64,
    pub ipv6_opts: u64,
    pub ipv4_tos: c_int,
    pub keepalive_time: c_int,

    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub sq_size: u16,
    pub rq_size: u16,
    pub sq_inline: u16,
    pub target_iomap_size: u16,

    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,

    remote_sge: u32,
    remote_sgl: Sge,
    remote_iomap: Sge,
    target_sge: usize,
    target: Option<Buf>,

    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    rbuf: Option<Buf>,
    rmsg: Vec<(u32, u32)>,
    rmsg_head: usize,
    rmsg_tail: usize,

    sbuf_bytes_avail: u32,
    sbuf: Option<Buf>,
    /// Offset in `sbuf` of the next copy (`ssgl[0].addr`).
    sbuf_pos: u32,
    sqe_avail: u32,

    pub comp_channel: *mut CompChannel,
    pub cq: *mut Cq,
    pub cq_armed: bool,
    pub iomaps: Vec<IoMap>,
}

// SAFETY: the raw pointers are C objects owned by this socket, used under its lock.
unsafe impl Send for Rs {}

impl Rs {
    /// A new unconnected socket on `id` (its own `channel`), sizes inherited from
    /// `parent` (a listener) or rdma-core's defaults.
    pub fn new(channel: *mut EventChannel, id: *mut CmId, parent: Option<&Rs>) -> Rs {
        let (sbuf_size, rbuf_size, sq_inline, sq_size, rq_size, iomap) = match parent {
            Some(p) => (p.sbuf_size, p.rbuf_size, p.sq_inline, p.sq_size, p.rq_size, p.target_iomap_size),
            None => (DEF_MEM, DEF_MEM, DEF_INLINE, DEF_SQSIZE, DEF_RQSIZE, 0),
        };
        Rs {
            channel,
            id,
            state: st::INIT,
            err: 0,
            fs_flags: 0,
            fd_flags: 0,
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            ipv4_tos: 0,
            keepalive_time: 0,
            sbuf_size,
            rbuf_size,
            sq_size,
            rq_size,
            sq_inline,
            target_iomap_size: iomap,
            ctrl_seqno: 0,
            ctrl_max_seqno: CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: 0,
            remote_sge: 0,
            remote_sgl: Sge::default(),
            remote_iomap: Sge::default(),
            target_sge: 0,
            target: None,
            rbuf_bytes_avail: 0,
            rbuf_free_offset: 0,
            rbuf_offset: 0,
            rbuf: None,
            rmsg: Vec::new(),
            rmsg_head: 0,
            rmsg_tail: 0,
            sbuf_bytes_avail: 0,
            sbuf: None,
            sbuf_pos: 0,
            sqe_avail: 0,
            comp_channel: null_mut(),
            cq: null_mut(),
            cq_armed: false,
            iomaps: Vec::new(),
        }
    }

    fn qp(&self) -> *mut Qp {
        // SAFETY: live id of this socket.
        unsafe { (*self.id).qp }
    }

    /// The fd of the rdma_cm event channel (the socket's number).
    pub fn cm_fd(&self) -> c_int {
        // SAFETY: live channel of this socket.
        unsafe { (*self.channel).fd }
    }

    /// The fds a blocked call waits on: the CQ's completion channel (when there is one)
    /// and the event channel.
    pub fn wait_fds(&self) -> Vec<c_int> {
        let mut v = vec![self.cm_fd()];
        if !self.comp_channel.is_null() {
            // SAFETY: live completion channel.
            v.push(unsafe { (*self.comp_channel).fd });
        }
        v
    }

    pub fn nonblocking(&self, flags: c_int) -> bool {
        (self.fs_flags & libc::O_NONBLOCK) != 0 || (flags & libc::MSG_DONTWAIT) != 0
    }

    // -----------------------------------------------------------------------------
    // Connection setup
    // -----------------------------------------------------------------------------

    /// Creates the CQ, the RC QP and the buffers, and posts the receives (rs_create_ep).
    fn create_ep(&mut self) -> Result<(), c_int> {
        self.sq_size = self.sq_size.clamp(QP_MIN, QP_MAX);
        self.rq_size = self.rq_size.clamp(QP_MIN, QP_MAX);
        // SAFETY: live id; it has a device once its address is resolved or it came
        // from a connection request.
        let (verbs, pd) = unsafe { ((*self.id).verbs, (*self.id).pd) };
        if verbs.is_null() || pd.is_null() {
            return Err(libc::EINVAL);
        }
        let ch = abi::create_comp_channel(verbs)?;
        self.comp_channel = ch;
        // SAFETY: the channel we just created; blocking waits use poll(2).
        unsafe { set_nonblock((*ch).fd, true) };
        let cq = abi::create_cq(verbs, c_int::from(self.sq_size) + c_int::from(self.rq_size), ch)?;
        self.cq = cq;
        let mut attr = abi::QpInitAttr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            max_send_wr: u32::from(self.sq_size),
            max_recv_wr: u32::from(self.rq_size),
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: u32::from(self.sq_inline),
            qp_type: abi::IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: live id, its PD, a valid attribute block.
        if unsafe { cm::rdma_create_qp(self.id.cast(), pd, (&mut attr as *mut abi::QpInitAttr).cast()) } != 0 {
            return Err(abi::errno());
        }
        self.sq_inline = attr.max_inline_data.min(u32::from(QP_MAX)) as u16;

        // rs_init_bufs.
        self.rmsg = vec![(0, 0); usize::from(self.rq_size) + 1];
        let mut sbuf_total = self.sbuf_size as usize;
        if usize::from(self.sq_inline) < wire::SGE_LEN {
            sbuf_total += wire::SGE_LEN * CTRL_SIZE as usize;
        }
        self.sbuf = Some(Buf::new(pd, sbuf_total, abi::IBV_ACCESS_LOCAL_WRITE)?);
        let tlen = wire::SGE_LEN * wire::SGL_SIZE + wire::IOMAP_LEN * usize::from(self.target_iomap_size);
        let rw = abi::IBV_ACCESS_LOCAL_WRITE | abi::IBV_ACCESS_REMOTE_WRITE;
        self.target = Some(Buf::new(pd, tlen, rw)?);
        self.rbuf = Some(Buf::new(pd, self.rbuf_size as usize, rw)?);
        self.sbuf_pos = 0;
        self.sbuf_bytes_avail = self.sbuf_size;
        self.rbuf_free_offset = self.rbuf_size >> 1;
        self.rbuf_bytes_avail = self.rbuf_size >> 1;
        self.sqe_avail = u32::from(self.sq_size) - self.ctrl_max_seqno;
        self.rseq_comp = self.rq_size >> 1;
        for _ in 0..self.rq_size {
            self.post_recv()?;
        }
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), c_int> {
        let mut wr = RecvWr { wr_id: wire::WR_ID_RECV, next: null_mut(), sg_list: null_mut(), num_sge: 0 };
        // SAFETY: live QP; a receive without scatter list (data comes by RDMA WRITE).
        match unsafe { abi::post_recv(self.qp(), &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// This side's connection data (rs_format_conn_data).
    fn conn_data(&self) -> ConnData {
        let (t, r) = (self.target.as_ref(), self.rbuf.as_ref());
        ConnData {
            version: wire::VERSION,
            flags: wire::FLAG_IOMAP,
            credits: self.rq_size,
            target_iomap_size: wire::value_to_scale(u32::from(self.target_iomap_size)),
            target_sgl: Sge {
                addr: t.map_or(0, Buf::addr),
                key: t.map_or(0, Buf::rkey),
                length: wire::SGL_SIZE as u32,
            },
            data_buf: Sge { addr: r.map_or(0, Buf::addr), key: r.map_or(0, Buf::rkey), length: self.rbuf_size >> 1 },
        }
    }

    /// Takes the peer's connection data (rs_save_conn_data).
    fn save_conn_data(&mut self, c: &ConnData) {
        self.remote_sgl = c.target_sgl;
        self.remote_sge = 1;
        if c.flags & wire::FLAG_IOMAP != 0 {
            self.remote_iomap = Sge {
                addr: c.target_sgl.addr + wire::SGE_LEN as u64 * u64::from(c.target_sgl.length),
                key: c.target_sgl.key,
                length: wire::scale_to_value(c.target_iomap_size),
            };
        }
        self.set_target_sgl(0, c.data_buf);
        self.sseq_comp = c.credits;
    }

    fn target_sgl_ptr(&self, i: usize) -> *mut [u8; wire::SGE_LEN] {
        let t = self.target.as_ref().map_or(null_mut(), |t| t.mem);
        // SAFETY: `i < SGL_SIZE` entries at the start of the target buffer.
        unsafe { t.add(i * wire::SGE_LEN).cast() }
    }

    /// Entry `i` of the target SGL: the peer writes it with RDMA WRITEs, hence volatile.
    fn target_sgl(&self, i: usize) -> Sge {
        // SAFETY: inside the target buffer (see target_sgl_ptr).
        Sge::from_le(&unsafe { core::ptr::read_volatile(self.target_sgl_ptr(i)) })
    }

    fn set_target_sgl(&mut self, i: usize, s: Sge) {
        // SAFETY: inside the target buffer.
        unsafe { core::ptr::write_volatile(self.target_sgl_ptr(i), s.to_le()) }
    }

    /// rbind.
    pub fn bind(&mut self, addr: *const libc::sockaddr) -> Result<(), c_int> {
        // SAFETY: live id; `addr` is the caller's sockaddr.
        if unsafe { cm::rdma_bind_addr(self.id.cast(), addr as *mut c_void) } != 0 {
            return Err(abi::errno());
        }
        self.state = st::BOUND;
        Ok(())
    }

    /// rlisten.
    pub fn listen(&mut self, backlog: c_int) -> Result<(), c_int> {
        if self.state == st::LISTENING {
            return Ok(());
        }
        // SAFETY: live id.
        if unsafe { cm::rdma_listen(self.id.cast(), backlog) } != 0 {
            return Err(abi::errno());
        }
        self.state = st::LISTENING;
        Ok(())
    }

    /// Starts rconnect: address resolution (the rest follows events, [`Rs::drive_cm`]).
    pub fn start_connect(&mut self, addr: *const libc::sockaddr) -> Result<(), c_int> {
        match self.state {
            st::INIT | st::BOUND => {}
            s if s & st::OPENING != 0 => return Err(libc::EALREADY),
            s if s & st::CONNECTED != 0 => return Err(libc::EISCONN),
            _ => return Err(libc::EINVAL),
        }
        // SAFETY: live id; `addr` is the caller's sockaddr (rdma_resolve_addr copies it).
        if unsafe { cm::rdma_resolve_addr(self.id.cast(), null_mut(), addr as *mut c_void, 2000) } != 0 {
            return Err(abi::errno());
        }
        self.state = st::RESOLVING_ADDR;
        Ok(())
    }

    /// Takes every queued rdma_cm event of this socket's channel and acts on it.
    pub fn drive_cm(&mut self) {
        loop {
            let mut ev: *mut CmEvent = null_mut();
            // SAFETY: live channel (non-blocking fd); valid out-pointer.
            if unsafe { cm::rdma_get_cm_event(self.channel.cast(), (&mut ev as *mut *mut CmEvent).cast()) } != 0 {
                return;
            }
            // SAFETY: a delivered event, valid until acknowledged below.
            let (kind, status, pdata) = unsafe {
                let e = &*ev;
                let p = e.conn.private_data.cast::<u8>();
                let len = usize::from(e.conn.private_data_len);
                let data = if p.is_null() { Vec::new() } else { core::slice::from_raw_parts(p, len).to_vec() };
                (e.event, e.status, data)
            };
            // SAFETY: acknowledged once.
            unsafe { cm::rdma_ack_cm_event(ev.cast()) };
            self.on_cm_event(kind, status, &pdata);
        }
    }

    fn connect_failed(&mut self, err: c_int) {
        self.state = st::CONNECT_ERROR;
        self.err = err;
    }

    fn on_cm_event(&mut self, kind: u32, status: c_int, pdata: &[u8]) {
        match (self.state, kind) {
            (st::RESOLVING_ADDR, abi::ev::ADDR_RESOLVED) => {
                // SAFETY: live id.
                if unsafe { cm::rdma_resolve_route(self.id.cast(), 2000) } != 0 {
                    self.connect_failed(abi::errno());
                } else {
                    self.state = st::RESOLVING_ROUTE;
                }
            }
            (st::RESOLVING_ROUTE, abi::ev::ROUTE_RESOLVED) => {
                if let Err(e) = self.create_ep() {
                    return self.connect_failed(e);
                }
                let data = self.conn_data().emit();
                let mut param = ConnParam {
                    private_data: data.as_ptr().cast(),
                    private_data_len: data.len() as u8,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 1,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    srq: 0,
                    qp_num: 0,
                };
                // SAFETY: live id with its QP; `param` and `data` live for the call.
                if unsafe { cm::rdma_connect(self.id.cast(), (&mut param as *mut ConnParam).cast()) } != 0 {
                    self.connect_failed(abi::errno());
                } else {
                    self.state = st::CONNECTING;
                }
            }
            (st::CONNECTING, abi::ev::ESTABLISHED) => match parse_peer(pdata) {
                Ok(c) => {
                    self.save_conn_data(&c);
                    self.state = st::CONNECT_RDWR;
                }
                Err(e) => self.connect_failed(e),
            },
            (s, abi::ev::REJECTED) if s & st::OPENING != 0 => self.connect_failed(libc::ECONNREFUSED),
            (s, abi::ev::ADDR_ERROR | abi::ev::ROUTE_ERROR | abi::ev::UNREACHABLE | abi::ev::CONNECT_ERROR)
                if s & st::OPENING != 0 =>
            {
                let e = if status < 0 { -status } else { libc::ETIMEDOUT };
                self.connect_failed(if e == 0 { libc::ETIMEDOUT } else { e })
            }
            (s, abi::ev::DISCONNECTED | abi::ev::DEVICE_REMOVAL) if s & st::CONNECTED != 0 => {
                self.state = st::DISCONNECTED;
            }
            _ => {}
        }
    }

    /// The accept half on the new socket (rs_accept): buffers, QP, the REP with our
    /// connection data. `req` is the REQ's private data.
    pub fn accept(&mut self, req: &[u8], initiator_depth: u8, responder_resources: u8) -> Result<(), c_int> {
        let c = parse_peer(req)?;
        self.create_ep()?;
        self.save_conn_data(&c);
        let data = self.conn_data().emit();
        let mut param = ConnParam {
            private_data: data.as_ptr().cast(),
            private_data_len: data.len() as u8,
            responder_resources,
            initiator_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        // SAFETY: live id with its QP; `param`/`data` live for the call.
        if unsafe { cm::rdma_accept(self.id.cast(), (&mut param as *mut ConnParam).cast()) } != 0 {
            return Err(abi::errno());
        }
        self.state = st::CONNECT_RDWR;
        Ok(())
    }

    // -----------------------------------------------------------------------------
    // Completions and credits
    // -----------------------------------------------------------------------------

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= (self.rbuf_size >> 1) || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & st::CONNECTED != 0
    }

    /// Grants the peer credits, and half of the receive buffer when it is free
    /// (rs_send_credits).
    fn send_credits(&mut self) {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add(self.rq_size >> 1);
        let credit = wire::msg(op::SGL, u32::from(self.rseq_no.wrapping_add(self.rq_size)));
        if self.rbuf_bytes_avail >= (self.rbuf_size >> 1) {
            let r = self.rbuf.as_ref().map_or((0, 0), |b| (b.addr(), b.rkey()));
            let sge = Sge { addr: r.0 + u64::from(self.rbuf_free_offset), key: r.1, length: self.rbuf_size >> 1 };
            let bytes = sge.to_le();
            let (mut ib, flags);
            if usize::from(self.sq_inline) < wire::SGE_LEN {
                // In the control area after the send buffer, one slot per control sequence.
                let slot = self.sbuf_size as usize + wire::SGE_LEN * (self.ctrl_seqno & (CTRL_SIZE - 1)) as usize;
                let sb = self.sbuf.as_ref().map_or(null_mut(), |b| b.mem);
                // SAFETY: the control area is part of the send buffer (create_ep).
                unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), sb.add(slot), wire::SGE_LEN) };
                ib = IbSge { addr: sb as u64 + slot as u64, length: wire::SGE_LEN as u32, lkey: self.sbuf.as_ref().map_or(0, Buf::lkey) };
                flags = 0;
            } else {
                ib = IbSge { addr: bytes.as_ptr() as u64, length: wire::SGE_LEN as u32, lkey: 0 };
                flags = abi::IBV_SEND_INLINE;
            }
            let addr = self.remote_sgl.addr + u64::from(self.remote_sge) * wire::SGE_LEN as u64;
            let key = self.remote_sgl.key;
            let _ = self.post_write_imm(core::slice::from_mut(&mut ib), credit, flags, addr, key);
            self.rbuf_bytes_avail -= self.rbuf_size >> 1;
            self.rbuf_free_offset += self.rbuf_size >> 1;
            if self.rbuf_free_offset >= self.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge += 1;
            if self.remote_sge == self.remote_sgl.length {
                self.remote_sge = 0;
            }
        } else {
            let _ = self.post_msg(credit);
        }
    }

    fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
        }
    }

    /// A zero-length RDMA WRITE with immediate `msg` (rs_post_msg).
    fn post_msg(&mut self, msg: u32) -> Result<(), c_int> {
        let mut wr = SendWr::new();
        wr.wr_id = u64::from(msg);
        wr.opcode = abi::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = msg.to_be();
        // SAFETY: live QP; no scatter list.
        match unsafe { abi::post_send(self.qp(), &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    fn post_write_imm(&mut self, sgl: &mut [IbSge], msg: u32, flags: u32, addr: u64, rkey: u32) -> Result<(), c_int> {
        self.post_write(sgl, msg, abi::IBV_WR_RDMA_WRITE_WITH_IMM, flags, addr, rkey)
    }

    fn post_write(&mut self, sgl: &mut [IbSge], wr_data: u32, opcode: u32, flags: u32, addr: u64, rkey: u32) -> Result<(), c_int> {
        let mut wr = SendWr::new();
        wr.wr_id = u64::from(wr_data);
        wr.sg_list = sgl.as_mut_ptr();
        wr.num_sge = sgl.len() as c_int;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.imm_data = wr_data.to_be();
        wr.remote_addr = addr;
        wr.rkey = rkey;
        // SAFETY: live QP; `sgl` lives for the call (inline data is copied, other data
        // lies in the registered send buffer).
        match unsafe { abi::post_send(self.qp(), &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Takes every completion (rs_poll_cq).
    fn poll_cq(&mut self) {
        if self.cq.is_null() {
            return;
        }
        let mut rcnt = 0;
        let mut wc = Wc::default();
        // SAFETY: live CQ.
        while unsafe { abi::poll_cq(self.cq, &mut wc) } > 0 {
            if wc.wr_id & wire::WR_ID_RECV != 0 {
                if wc.status != 0 {
                    // A flushed receive: the connection is gone (see docs/rsockets.md).
                    if self.state & st::CONNECTED != 0 {
                        self.state = st::DISCONNECTED;
                    }
                    continue;
                }
                rcnt += 1;
                if wc.wc_flags & abi::IBV_WC_WITH_IMM == 0 {
                    continue;
                }
                let m = u32::from_be(wc.imm_data);
                match wire::msg_op(m) {
                    op::SGL => self.sseq_comp = wire::msg_data(m) as u16,
                    op::IOMAP_SGL | op::WRITE => {}
                    op::CTRL => match wire::msg_data(m) {
                        ctrl::DISCONNECT => {
                            self.state = st::DISCONNECTED;
                            return;
                        }
                        // Keepalives only prove the connection is alive.
                        ctrl::KEEPALIVE => {}
                        ctrl::SHUTDOWN => {
                            if self.state & st::WRITABLE != 0 {
                                self.state &= !st::READABLE;
                            } else {
                                self.state = st::DISCONNECTED;
                                return;
                            }
                        }
                        _ => {}
                    },
                    o => {
                        self.rmsg[self.rmsg_tail] = (o, wire::msg_data(m));
                        self.rmsg_tail += 1;
                        if self.rmsg_tail == self.rmsg.len() {
                            self.rmsg_tail = 0;
                        }
                    }
                }
            } else {
                let d = wc.wr_id as u32;
                match wire::msg_op(d) {
                    op::SGL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                    op::CTRL => {
                        self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                        if wire::msg_data(d) == ctrl::DISCONNECT {
                            self.state = st::DISCONNECTED;
                        }
                    }
                    op::IOMAP_SGL => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += wire::IOMAP_LEN as u32;
                    }
                    _ => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += wire::msg_data(d);
                    }
                }
                if wc.status != 0 && self.state & st::CONNECTED != 0 {
                    self.state = st::ERROR;
                    self.err = libc::EIO;
                }
            }
        }
        if self.state & st::CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.post_recv() {
                    self.state = st::ERROR;
                    self.err = e;
                    break;
                }
            }
        }
    }

    /// Polls the CQ and grants credits (one round of rs_process_cq, never blocking).
    pub fn progress(&mut self) {
        self.update_credits();
        self.poll_cq();
        self.update_credits();
    }

    /// Arms the CQ (once per event); true if it was armed now, so the caller must poll
    /// again before sleeping.
    pub fn arm(&mut self) -> bool {
        if self.cq.is_null() || self.cq_armed {
            return false;
        }
        // SAFETY: live CQ.
        unsafe { abi::req_notify_cq(self.cq) };
        self.cq_armed = true;
        true
    }

    /// After `poll(2)` reported the completion channel: takes its event.
    pub fn take_cq_events(&mut self) {
        if !self.comp_channel.is_null() && abi::take_cq_event(self.comp_channel) {
            self.cq_armed = false;
        }
    }

    pub fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target_sgl(self.target_sge).length != 0
    }

    pub fn conn_can_send(&self) -> bool {
        self.can_send() || self.state & st::WRITABLE == 0
    }

    pub fn have_rdata(&self) -> bool {
        self.rmsg_head != self.rmsg_tail
    }

    pub fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & st::READABLE == 0
    }

    pub fn conn_can_send_ctrl(&self) -> bool {
        self.ctrl_avail() || self.state & st::CONNECTED == 0
    }

    pub fn all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno)).wrapping_add(self.sqe_avail) == u32::from(self.sq_size)
            || self.state & st::CONNECTED == 0
    }

    // -----------------------------------------------------------------------------
    // Data
    // -----------------------------------------------------------------------------

    /// Copies queued data out (the body of rrecv); `peek` leaves it queued.
    pub fn copy_out(&mut self, out: &mut [u8], peek: bool) -> usize {
        let rb = self.rbuf.as_ref().map_or(null_mut(), |b| b.mem);
        let (mut head, mut off) = (self.rmsg_head, self.rbuf_offset);
        let mut done = 0;
        while done < out.len() && head != self.rmsg_tail {
            let left = out.len() - done;
            let avail = self.rmsg[head].1 as usize;
            let mut rsize = left.min(avail);
            if left < avail {
                if !peek {
                    self.rmsg[head].1 -= left as u32;
                }
            } else {
                if !peek {
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                }
                head += 1;
                if head == self.rmsg.len() {
                    head = 0;
                }
            }
            let end = (self.rbuf_size - off) as usize;
            if rsize > end {
                // SAFETY: `off..rbuf_size` is inside the receive buffer, `out` has room.
                unsafe { core::ptr::copy_nonoverlapping(rb.add(off as usize), out[done..].as_mut_ptr(), end) };
                done += end;
                rsize -= end;
                off = 0;
                if !peek {
                    self.rbuf_bytes_avail += end as u32;
                }
            }
            // SAFETY: as above.
            unsafe { core::ptr::copy_nonoverlapping(rb.add(off as usize), out[done..].as_mut_ptr(), rsize) };
            done += rsize;
            off += rsize as u32;
            if !peek {
                self.rbuf_bytes_avail += rsize as u32;
            }
        }
        if !peek {
            self.rmsg_head = head;
            self.rbuf_offset = off;
        }
        done
    }

    /// The next transfer size for `left` bytes (rsend's `olen` doubling), bounded by the
    /// send buffer and the target buffer.
    pub fn xfer_size(&self, left: usize, olen: &mut u32) -> u32 {
        let mut x = if (*olen as usize) < left {
            let x = *olen;
            if *olen < MAX_TRANSFER {
                *olen <<= 1;
            }
            x
        } else {
            left as u32
        };
        x = x.min(self.sbuf_bytes_avail).min(self.target_sgl(self.target_sge).length);
        x
    }

    pub fn olap_start() -> u32 {
        OLAP_START
    }

    /// Stages `data` (one transfer, `data.len() <= xfer_size`) and posts it: inline when
    /// small, else through the send buffer ring; `dest` is `None` for the peer's receive
    /// buffer (rs_write_data), or an iomap address and key (rs_write_direct).
    pub fn write(&mut self, data: &[u8], dest: Option<(u64, u32)>) -> Result<(), c_int> {
        let len = data.len() as u32;
        let (msg, opcode, addr, rkey) = match dest {
            None => {
                self.sseq_no = self.sseq_no.wrapping_add(1);
                let t = self.target_sgl(self.target_sge);
                let mut nt = t;
                nt.addr += u64::from(len);
                nt.length -= len;
                self.set_target_sgl(self.target_sge, nt);
                if nt.length == 0 {
                    self.target_sge = (self.target_sge + 1) % wire::SGL_SIZE;
                }
                (wire::msg(op::DATA, len), abi::IBV_WR_RDMA_WRITE_WITH_IMM, t.addr, t.key)
            }
            Some((addr, key)) => (wire::msg(op::WRITE, len), abi::IBV_WR_RDMA_WRITE, addr, key),
        };
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        if len <= u32::from(self.sq_inline) {
            let mut sge = [IbSge { addr: data.as_ptr() as u64, length: len, lkey: 0 }];
            return self.post_write(&mut sge, msg, opcode, abi::IBV_SEND_INLINE, addr, rkey);
        }
        let (sb, lkey) = self.sbuf.as_ref().map_or((null_mut(), 0), |b| (b.mem, b.lkey()));
        let left = self.sbuf_size - self.sbuf_pos;
        let first = len.min(left);
        // SAFETY: `sbuf_pos + first <= sbuf_size`, the rest from the start of the ring.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), sb.add(self.sbuf_pos as usize), first as usize);
            core::ptr::copy_nonoverlapping(data.as_ptr().add(first as usize), sb, (len - first) as usize);
        }
        let mut sgl = [
            IbSge { addr: sb as u64 + u64::from(self.sbuf_pos), length: first, lkey },
            IbSge { addr: sb as u64, length: len - first, lkey },
        ];
        let n = if first == len { 1 } else { 2 };
        self.sbuf_pos = if first == len { (self.sbuf_pos + len) % self.sbuf_size } else { len - first };
        self.post_write(&mut sgl[..n], msg, opcode, 0, addr, rkey)
    }

    /// Queues a control message (rshutdown); false if no control slot is free.
    pub fn send_ctrl(&mut self, c: u32) -> bool {
        if self.state & st::CONNECTED == 0 || !self.ctrl_avail() {
            return false;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.post_msg(wire::msg(op::CTRL, c)).is_ok()
    }

    // -----------------------------------------------------------------------------
    // iomap
    // -----------------------------------------------------------------------------

    /// The peer's iomap entry covering `offset` (rs_find_iomap).
    pub fn find_iomap(&self, offset: u64) -> Option<(u64, Sge)> {
        let t = self.target.as_ref()?;
        (0..usize::from(self.target_iomap_size)).find_map(|i| {
            let at = wire::SGE_LEN * wire::SGL_SIZE + i * wire::IOMAP_LEN;
            // SAFETY: entry `i` of the iomap table inside the target buffer.
            let b: [u8; wire::IOMAP_LEN] = unsafe { core::ptr::read_volatile(t.mem.add(at).cast()) };
            let off = u64::from_le_bytes(b[0..8].try_into().unwrap_or_default());
            let sge = Sge::from_le(b[8..24].try_into().unwrap_or(&[0; 16]));
            (offset >= off && offset < off + u64::from(sge.length)).then_some((off, sge))
        })
    }

    /// The first pending iomap, written into the peer's iomap table (rs_send_iomaps).
    pub fn send_one_iomap(&mut self) -> Result<bool, c_int> {
        let Some(i) = self.iomaps.iter().position(|m| m.pending) else {
            return Ok(false);
        };
        let (offset, mr, index) = (self.iomaps[i].offset, self.iomaps[i].mr, self.iomaps[i].index.unwrap_or(0));
        let mut entry = [0u8; wire::IOMAP_LEN];
        entry[0..8].copy_from_slice(&offset.to_le_bytes());
        // SAFETY: live registration of this socket.
        let sge = unsafe { Sge { addr: (*mr).addr as u64, key: (*mr).rkey, length: (*mr).length as u32 } };
        entry[8..24].copy_from_slice(&sge.to_le());
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= wire::IOMAP_LEN as u32;
        let addr = self.remote_iomap.addr + (index * wire::IOMAP_LEN) as u64;
        let key = self.remote_iomap.key;
        self.iomaps[i].pending = false;
        // Staged in the send buffer ring: the entry must outlive the post when not inline.
        let (sb, lkey) = self.sbuf.as_ref().map_or((null_mut(), 0), |b| (b.mem, b.lkey()));
        let mut sgl;
        let flags;
        if usize::from(self.sq_inline) >= wire::IOMAP_LEN {
            sgl = vec![IbSge { addr: entry.as_ptr() as u64, length: wire::IOMAP_LEN as u32, lkey: 0 }];
            flags = abi::IBV_SEND_INLINE;
        } else {
            let left = (self.sbuf_size - self.sbuf_pos) as usize;
            let first = wire::IOMAP_LEN.min(left);
            // SAFETY: inside the send buffer ring.
            unsafe {
                core::ptr::copy_nonoverlapping(entry.as_ptr(), sb.add(self.sbuf_pos as usize), first);
                core::ptr::copy_nonoverlapping(entry.as_ptr().add(first), sb, wire::IOMAP_LEN - first);
            }
            sgl = vec![IbSge { addr: sb as u64 + u64::from(self.sbuf_pos), length: first as u32, lkey }];
            if first < wire::IOMAP_LEN {
                sgl.push(IbSge { addr: sb as u64, length: (wire::IOMAP_LEN - first) as u32, lkey });
                self.sbuf_pos = (wire::IOMAP_LEN - first) as u32;
            } else {
                self.sbuf_pos = (self.sbuf_pos + first as u32) % self.sbuf_size;
            }
            flags = 0;
        }
        self.post_write_imm(&mut sgl, wire::msg(op::IOMAP_SGL, index as u32), flags, addr, key)?;
        Ok(true)
    }

    /// The remote iomap slots (`remote_iomap.length`).
    pub fn remote_iomap_slots(&self) -> usize {
        self.remote_iomap.length as usize
    }

    // -----------------------------------------------------------------------------
    // Teardown
    // -----------------------------------------------------------------------------

    /// Frees everything (rs_free): the QP, buffers, CQ, channel, id, event channel.
    pub fn free(&mut self) {
        for m in self.iomaps.drain(..) {
            abi::dereg_mr(m.mr);
        }
        // SAFETY: live id; its QP (if any) is ours.
        unsafe {
            if !(*self.id).qp.is_null() {
                cm::rdma_destroy_qp(self.id.cast());
            }
        }
        for b in [self.sbuf.as_mut(), self.rbuf.as_mut(), self.target.as_mut()].into_iter().flatten() {
            b.free();
        }
        if !self.cq.is_null() {
            abi::destroy_cq(self.cq);
            self.cq = null_mut();
        }
        if !self.comp_channel.is_null() {
            abi::destroy_comp_channel(self.comp_channel);
            self.comp_channel = null_mut();
        }
        // SAFETY: our id and channel, destroyed once.
        unsafe {
            cm::rdma_destroy_id(self.id.cast());
            cm::rdma_destroy_event_channel(self.channel.cast());
        }
    }
}

/// The peer's connection data: version 1 from a little-endian host (a big-endian peer,
/// `RS_CONN_FLAG_NET`, would need its SGL entries swapped, which rverbs does not do:
/// `EOPNOTSUPP`, as rdma-core answers a version it does not know).
fn parse_peer(b: &[u8]) -> Result<ConnData, c_int> {
    match ConnData::parse(b) {
        Some(c) if c.flags & wire::FLAG_NET == 0 => Ok(c),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// Sets or clears `O_NONBLOCK` on `fd`.
///
/// # Safety
/// `fd` is an open descriptor.
pub unsafe fn set_nonblock(fd: c_int, on: bool) {
    // SAFETY: caller contract.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            let nf = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
            libc::fcntl(fd, libc::F_SETFL, nf);
        }
    }
}
