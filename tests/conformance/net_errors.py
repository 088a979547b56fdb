#!/usr/bin/python3
"""RC error completions across the network (issue 12), as a pyverbs server and client.

The client and the server exchange QP numbers, PSNs, GIDs, rkeys and addresses over one
TCP connection (newline-delimited JSON), then run each scenario on fresh QPs, CQs and
memory regions (an error moves a QP to ERR). Every scenario names the completion status
the client's work request must end with; the statuses are rxe's, as
docs/rocev2-wire.md §3.3-§4 documents them:

  control          SEND, RDMA WRITE and RDMA READ succeed; the server checks the received
                   and written bytes, the client the read ones (so nothing passes when
                   nothing works)
  rnr0, rnr1       SEND to a QP in RTS with no receive posted (min_rnr_timer 1 = 10 us),
                   rnr_retry 0 and 1: RNR NAKs until RNR_RETRY_EXC_ERR
  retry-err,       the server's QP is moved to ERR (RESET) once connected, so it answers
  retry-reset      nothing: SEND with timeout 12 (16.8 ms), retry_cnt 1 -> RETRY_EXC_ERR
  write-rkey       RDMA WRITE with an rkey the server never registered: NAK remote access
                   error -> REM_ACCESS_ERR
  read-bounds      RDMA READ of 64 bytes starting 8 bytes before the end of the server's
                   region: NAK remote access error -> REM_ACCESS_ERR
  send-too-large   SEND of 256 bytes into a posted receive of 64. An rverbs server answers
                   NAK invalid request -> REM_INV_REQ_ERR at the client (docs/rocev2-wire.md §4,
                   IBTA) and completes its receive LOC_LEN_ERR (docs/rxe-differences.md,
                   ibv_poll_cq(3)), checked. rxe (Debian 12's 6.1, measured rxe against
                   rxe) takes the too-small receive for a malformed WQE: NAK remote
                   operational error, receive LOC_QP_OP_ERR, so the client must report
                   REM_OP_ERR, as rxe's own completer does (see expected()); docs/rocev2-wire.md
                   §3.3's "invalid request" row is not what this rxe sends. An rxe server's
                   receive status is printed, not checked.

After every error the client's QP must be in ERR (docs/rocev2-wire.md §4: "QP -> ERR").
`vendor_err` is printed; it is checked only on an rverbs side (its codes are documented in
rverbs_proto::vendor_err; rxe always writes 0).

Every wait is bounded: completions are polled against a deadline (--deadline, 10 s), TCP
reads time out after 60 s. The client prints one PASS/FAIL line per scenario and
"N passed, N failed" last, and exits 1 on any failure; the server exits 1 when one of its
own checks failed or the exchange broke.

Also, alone: `unreachable` moves an RC QP to RTR towards the GID of an address of the
link that nobody holds (--server): ibv_modify_qp must fail with ETIMEDOUT or EHOSTUNREACH
(the kernel's RoCE providers resolve the destination's neighbour at RTR,
ib_resolve_eth_dmac) and leave the QP in INIT.

usage:
  net_errors.py server --dev DEV --ip LOCAL_IP [--listen ADDR] [--port PORT]
  net_errors.py client --dev DEV --ip LOCAL_IP --server ADDR [--port PORT] [--only NAME,...]
  net_errors.py unreachable --dev DEV --ip LOCAL_IP --server UNUSED_ADDR

LOCAL_IP selects the RoCE v2 GID (::ffff:LOCAL_IP) of port 1. Run with /usr/bin/python3
(Debian's python3-pyverbs); LD_LIBRARY_PATH selects rverbs' drop-in libibverbs.so.1.
"""

import argparse
import ipaddress
import json
import os
import random
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

PORT_NUM = 1
MR_LEN = 4096
MIN_RNR_TIMER = 1          # 10 us (docs/rocev2-wire.md §3.4 table)
CONTROL_SEND = 256         # control: SEND of this many bytes into a 4096-byte receive
CONTROL_WRITE = (1024, 512)  # control: WRITE at this offset of the server's region, length
CONTROL_READ = (2048, 512)   # control: READ from this offset, length
SMALL_RECV = 64            # send-too-large: the posted receive
LARGE_SEND = 256           # send-too-large: the SEND

# ibv_wc_status values (docs/rocev2-wire.md §4).
WC_NAMES = {
    0: 'SUCCESS', 1: 'LOC_LEN_ERR', 2: 'LOC_QP_OP_ERR', 3: 'LOC_EEC_OP_ERR', 4: 'LOC_PROT_ERR',
    5: 'WR_FLUSH_ERR', 6: 'MW_BIND_ERR', 7: 'BAD_RESP_ERR', 8: 'LOC_ACCESS_ERR',
    9: 'REM_INV_REQ_ERR', 10: 'REM_ACCESS_ERR', 11: 'REM_OP_ERR', 12: 'RETRY_EXC_ERR',
    13: 'RNR_RETRY_EXC_ERR', 14: 'LOC_RDD_VIOL_ERR', 15: 'REM_INV_RD_REQ_ERR',
    16: 'REM_ABORT_ERR', 17: 'INV_EECN_ERR', 18: 'INV_EEC_STATE_ERR', 19: 'FATAL_ERR',
    20: 'RESP_TIMEOUT_ERR', 21: 'GENERAL_ERR',
}
QPS_NAMES = {0: 'RESET', 1: 'INIT', 2: 'RTR', 3: 'RTS', 4: 'SQD', 5: 'SQE', 6: 'ERR'}

# rverbs_proto::vendor_err codes an rverbs side must write.
VE_RECV_TOO_SMALL = 0x15
VE_REMOTE_INVALID = 0x27
VE_REMOTE_OP = 0x29
VE_REMOTE_ACCESS = 0x2c
VE_RNR_EXHAUSTED = 0x30
VE_RETRY_EXHAUSTED = 0x31


def wc_name(status):
    return f'IBV_WC_{WC_NAMES.get(status, "?")} ({status})'


class Scenario:
    """One row of the module doc: how both sides are set up and what the client expects."""

    def __init__(self, name, what, *, status, vendor_err=None, op=None, recvs=(),
                 server_after=None, timeout=14, retry_cnt=6, rnr_retry=6):
        self.name = name
        self.what = what
        self.status = status            # the client's expected completion status
        self.vendor_err = vendor_err    # ... and its vendor_err when the client is rverbs
        self.op = op                    # what the client posts (see post())
        self.recvs = recvs              # receive lengths the server posts
        self.server_after = server_after  # QP state the server moves to once connected
        self.timeout = timeout          # the client's ACK timeout exponent
        self.retry_cnt = retry_cnt
        self.rnr_retry = rnr_retry


SCENARIOS = [
    Scenario('control', 'SEND, RDMA WRITE and RDMA READ succeed', status=0, op='control',
             recvs=(MR_LEN,)),
    Scenario('rnr0', 'SEND with no receive posted, rnr_retry 0',
             status=e.IBV_WC_RNR_RETRY_EXC_ERR, vendor_err=VE_RNR_EXHAUSTED, op='send',
             rnr_retry=0),
    Scenario('rnr1', 'SEND with no receive posted, rnr_retry 1',
             status=e.IBV_WC_RNR_RETRY_EXC_ERR, vendor_err=VE_RNR_EXHAUSTED, op='send',
             rnr_retry=1),
    Scenario('retry-err', 'SEND to a QP moved to ERR, timeout 12, retry_cnt 1',
             status=e.IBV_WC_RETRY_EXC_ERR, vendor_err=VE_RETRY_EXHAUSTED, op='send',
             recvs=(MR_LEN,), server_after=e.IBV_QPS_ERR, timeout=12, retry_cnt=1),
    Scenario('retry-reset', 'SEND to a QP moved to RESET, timeout 12, retry_cnt 1',
             status=e.IBV_WC_RETRY_EXC_ERR, vendor_err=VE_RETRY_EXHAUSTED, op='send',
             recvs=(MR_LEN,), server_after=e.IBV_QPS_RESET, timeout=12, retry_cnt=1),
    Scenario('write-rkey', 'RDMA WRITE with an unregistered rkey',
             status=e.IBV_WC_REM_ACCESS_ERR, vendor_err=VE_REMOTE_ACCESS, op='write-bad-rkey'),
    Scenario('read-bounds', 'RDMA READ of 64 bytes past the end of the region',
             status=e.IBV_WC_REM_ACCESS_ERR, vendor_err=VE_REMOTE_ACCESS, op='read-bounds'),
    Scenario('send-too-large', f'SEND of {LARGE_SEND} bytes into a {SMALL_RECV}-byte receive',
             status=e.IBV_WC_REM_INV_REQ_ERR, vendor_err=VE_REMOTE_INVALID, op='send-large',
             recvs=(SMALL_RECV,)),
]
BY_NAME = {s.name: s for s in SCENARIOS}


class Failed(Exception):
    """A broken exchange or setup: the run cannot go on."""


def pattern(seed, n):
    return bytes((seed * 31 + i * 7) & 0xff for i in range(n))


# ------------------------------------------------------------------------- the device ---

class Device:
    """The context, PD and GID index of one side."""

    def __init__(self, dev, ip):
        self.ctx = Context(name=dev)
        self.is_rverbs = dev.startswith('rverbs')
        self.pd = PD(self.ctx)
        self.gid_index, self.gid = self.find_gid(ip)

    def find_gid(self, ip):
        want = ipaddress.IPv6Address('::ffff:' + ip).exploded
        port = self.ctx.query_port(PORT_NUM)
        found = []
        for i in range(port.gid_tbl_len):
            try:
                g = self.ctx.query_gid(PORT_NUM, i)
            except Exception:   # an empty slot
                continue
            if str(g.gid) == want:
                try:
                    v2 = self.ctx.query_gid_type(PORT_NUM, i) == e.IBV_GID_TYPE_ROCE_V2
                except Exception:
                    v2 = True
                found.append((not v2, i, str(g.gid)))
        if not found:
            raise Failed(f'no GID {want} on {self.ctx.name} port {PORT_NUM}')
        _, idx, gid = min(found)
        return idx, gid


class Resources:
    """One scenario's CQ, MR and RC QP (RESET until connected)."""

    def __init__(self, dev):
        self.dev = dev
        self.cq = CQ(dev.ctx, 16, None, None, 0)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.mr = MR(dev.pd, MR_LEN, access)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1))
        self.qp = QP(dev.pd, init)
        self.psn = random.getrandbits(24)

    def info(self):
        return {'qpn': self.qp.qp_num, 'psn': self.psn, 'gid': self.dev.gid,
                'rkey': self.mr.rkey, 'addr': self.mr.buf, 'len': MR_LEN}

    def connect(self, peer, *, timeout=14, retry_cnt=6, rnr_retry=6):
        """RESET -> INIT -> RTR -> RTS towards `peer` (its info()), path MTU 1024."""
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = PORT_NUM
        a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        a.path_mtu = e.IBV_MTU_1024
        a.dest_qp_num = peer['qpn']
        a.rq_psn = peer['psn']
        a.max_dest_rd_atomic = 1
        a.min_rnr_timer = MIN_RNR_TIMER
        dgid = GID()
        dgid.gid = peer['gid']
        gr = GlobalRoute(dgid=dgid, sgid_index=self.dev.gid_index, hop_limit=64)
        a.ah_attr = AHAttr(port_num=PORT_NUM, is_global=1, gr=gr)
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                       e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.sq_psn = self.psn
        a.timeout = timeout
        a.retry_cnt = retry_cnt
        a.rnr_retry = rnr_retry
        a.max_rd_atomic = 1
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
                       e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def move_to(self, state):
        a = QPAttr()
        a.qp_state = state
        self.qp.modify(a, e.IBV_QP_STATE)

    def state(self):
        attr, _ = self.qp.query(e.IBV_QP_STATE)
        return attr.qp_state

    def poll(self, deadline_s):
        """The next completion, or None after `deadline_s` seconds."""
        end = time.monotonic() + deadline_s
        while True:
            n, wcs = self.cq.poll(1)
            if n:
                return wcs[0]
            if time.monotonic() >= end:
                return None
            time.sleep(0.0005)

    def close(self):
        for o in (self.qp, self.mr, self.cq):
            try:
                o.close()
            except Exception as ex:   # keep going: the next scenario has its own objects
                print(f'warning: close: {ex}', file=sys.stderr)


# --------------------------------------------------------------------- the TCP channel ---

class Channel:
    def __init__(self, sock):
        sock.settimeout(60)
        self.sock = sock
        self.rfile = sock.makefile('r')

    def send(self, **msg):
        self.sock.sendall((json.dumps(msg) + '\n').encode())

    def recv(self):
        try:
            line = self.rfile.readline()
        except socket.timeout:
            raise Failed('no message from the peer within 60 s')
        if not line:
            raise Failed('the peer closed the connection')
        return json.loads(line)


# -------------------------------------------------------------------------- the server ---

def serve(args):
    dev = Device(args.dev, args.ip)
    print(f'server: {args.dev} GID index {dev.gid_index} ({dev.gid}), '
          f'{"rverbs" if dev.is_rverbs else "not rverbs"}', flush=True)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.listen, args.port))
    lsock.listen(1)
    lsock.settimeout(args.accept_timeout)
    try:
        conn, peer = lsock.accept()
    except socket.timeout:
        raise Failed(f'no client within {args.accept_timeout} s')
    lsock.close()
    ch = Channel(conn)
    bad = 0
    while True:
        m = ch.recv()
        if m['op'] == 'bye':
            break
        sc = BY_NAME[m['scenario']]
        res = Resources(dev)
        try:
            if sc.op == 'control':
                off, n = CONTROL_READ
                res.mr.write(pattern(3, n), n, off)
            res.connect(m['peer'])
            for i, length in enumerate(sc.recvs):
                res.qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[SGE(res.mr.buf, length, res.mr.lkey)]))
            if sc.server_after is not None:
                res.move_to(sc.server_after)
            ch.send(op='ready', peer=res.info(),
                    server={'device': args.dev, 'rverbs': dev.is_rverbs, 'kernel': os.uname().release})
            done = ch.recv()
            if done.get('op') != 'done':
                raise Failed(f'expected "done", got {done!r}')
            report = server_check(sc, res, dev, args.deadline)
            for line in report['lines']:
                print(f'server {sc.name}: {line}', flush=True)
            if report['why']:
                bad += 1
                print(f'server {sc.name}: FAIL {"; ".join(report["why"])}', flush=True)
            ch.send(op='report', **report)
        finally:
            res.close()
    return 1 if bad else 0


def server_check(sc, res, dev, deadline):
    """What the server saw in a scenario: lines to print and reasons it failed."""
    lines, why, recv_status = [], [], None
    if sc.name == 'control':
        wc = res.poll(deadline)
        if wc is None:
            why.append(f'no receive completion within {deadline} s')
        else:
            lines.append(f'receive {wc_name(wc.status)}, byte_len {wc.byte_len}, vendor_err {wc.vendor_err:#x}')
            if wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_RECV or wc.byte_len != CONTROL_SEND:
                why.append(f'receive: expected IBV_WC_SUCCESS RECV of {CONTROL_SEND} bytes, got '
                           f'{wc_name(wc.status)} opcode {wc.opcode} byte_len {wc.byte_len}')
            elif res.mr.read(CONTROL_SEND, 0) != pattern(1, CONTROL_SEND):
                why.append('the received bytes differ from those sent')
        off, n = CONTROL_WRITE
        if res.mr.read(n, off) != pattern(2, n):
            why.append('the RDMA WRITE bytes differ from those written')
        else:
            lines.append(f'RDMA WRITE bytes at offset {off} as written')
    elif sc.name == 'send-too-large':
        wc = res.poll(deadline)
        if wc is None:
            lines.append(f'no receive completion within {deadline} s')
            if dev.is_rverbs:
                why.append(f'no receive completion within {deadline} s')
        else:
            recv_status = wc.status
            lines.append(f'receive {wc_name(wc.status)}, vendor_err {wc.vendor_err:#x} '
                         f'(rverbs: IBV_WC_LOC_LEN_ERR; rxe: IBV_WC_LOC_QP_OP_ERR)')
            if dev.is_rverbs and (wc.status, wc.vendor_err) != (e.IBV_WC_LOC_LEN_ERR, VE_RECV_TOO_SMALL):
                why.append(f'receive: expected {wc_name(e.IBV_WC_LOC_LEN_ERR)} vendor_err '
                           f'{VE_RECV_TOO_SMALL:#x} (docs/rxe-differences.md), got {wc_name(wc.status)} '
                           f'vendor_err {wc.vendor_err:#x}')
    return {'lines': lines, 'why': why, 'recv_status': recv_status}


# -------------------------------------------------------------------------- the client ---

def post(sc, res, peer):
    """Posts the scenario's work requests; returns how many completions to expect."""
    lkey, buf = res.mr.lkey, res.mr.buf
    sig = e.IBV_SEND_SIGNALED

    def rdma(wr_id, opcode, off, n, rkey, raddr):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(buf + off, n, lkey)], send_flags=sig)
        wr.set_wr_rdma(rkey, raddr)
        res.qp.post_send(wr)

    if sc.op == 'control':
        res.mr.write(pattern(1, CONTROL_SEND), CONTROL_SEND, 0)
        off, n = CONTROL_WRITE
        res.mr.write(pattern(2, n), n, off)
        res.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(buf, CONTROL_SEND, lkey)], send_flags=sig))
        rdma(2, e.IBV_WR_RDMA_WRITE, off, n, peer['rkey'], peer['addr'] + off)
        roff, rn = CONTROL_READ
        rdma(3, e.IBV_WR_RDMA_READ, roff, rn, peer['rkey'], peer['addr'] + roff)
        return 3
    if sc.op == 'send':
        res.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(buf, 64, lkey)], send_flags=sig))
    elif sc.op == 'send-large':
        res.qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(buf, LARGE_SEND, lkey)], send_flags=sig))
    elif sc.op == 'write-bad-rkey':
        # The high bits of an rkey pick the region in rxe and rverbs alike: this one names
        # no region the server registered.
        bad_rkey = peer['rkey'] ^ 0x7fff0000
        rdma(1, e.IBV_WR_RDMA_WRITE, 0, 64, bad_rkey, peer['addr'])
    elif sc.op == 'read-bounds':
        rdma(1, e.IBV_WR_RDMA_READ, 0, 64, peer['rkey'], peer['addr'] + peer['len'] - 8)
    return 1


def client_run(sc, res, peer, deadline):
    """Posts one scenario's work requests and polls their completions; returns (wcs, why)."""
    count = post(sc, res, peer)
    wcs = []
    for k in range(count):
        wc = res.poll(deadline)
        if wc is None:
            return wcs, [f'no completion for work request {k + 1} of {count} within {deadline} s']
        wcs.append(wc)
    return wcs, []


def expected(sc, server, report):
    """The client's expected status, its vendor_err on rverbs, and a note on where the
    expectation comes from when it is not the scenario's own.

    send-too-large against an rxe responder: rxe finds the receive too small only while
    copying the payload (copy_data answers EINVAL), takes it for a malformed receive WQE,
    answers NAK remote operational error (0x63) and completes its receive LOC_QP_OP_ERR;
    its own completer then reports REM_OP_ERR (docs/rocev2-wire.md §3.4), which is what rxe
    gives rxe (tests/interop/rxe_errors.sh's reference run). The receive status shows which
    NAK rxe sent, so the client must report the status rxe reports for that NAK."""
    if sc.name == 'send-too-large' and not server['rverbs'] and report.get('recv_status') == e.IBV_WC_LOC_QP_OP_ERR:
        return (e.IBV_WC_REM_OP_ERR, VE_REMOTE_OP,
                'rxe responder: receive LOC_QP_OP_ERR, so NAK remote operational error (0x63)')
    return sc.status, sc.vendor_err, None


def judge(sc, res, dev, server, report, wcs):
    """Checks the client's completions against the expectation; returns (status, lines,
    why): the status expected, what to print and the reasons it failed."""
    lines, why = [], []
    status, vendor_err, note = expected(sc, server, report)
    if note:
        lines.append(f'expecting {wc_name(status)}: {note}')
    for wc in wcs:
        lines.append(f'wr_id {wc.wr_id}: {wc_name(wc.status)}, vendor_err {wc.vendor_err:#x}')
        if wc.status != status:
            why.append(f'wr_id {wc.wr_id}: expected {wc_name(status)}, got {wc_name(wc.status)}')
        elif dev.is_rverbs and vendor_err is not None and wc.vendor_err != vendor_err:
            why.append(f'wr_id {wc.wr_id}: expected vendor_err {vendor_err:#x} '
                       f'(rverbs_proto::vendor_err), got {wc.vendor_err:#x}')
    if sc.op == 'control' and len(wcs) == 3 and not why:
        roff, rn = CONTROL_READ
        if res.mr.read(rn, roff) != pattern(3, rn):
            why.append('the RDMA READ bytes differ from the server\'s')
        else:
            lines.append('RDMA READ bytes as the server wrote them')
    if sc.status != e.IBV_WC_SUCCESS:
        st = res.state()
        lines.append(f'QP state {QPS_NAMES.get(st, st)}')
        if st != e.IBV_QPS_ERR:
            why.append(f'the QP is in {QPS_NAMES.get(st, st)} after the error, expected ERR')
    return status, lines, why


def connect_tcp(addr, port, within):
    end = time.monotonic() + within
    while True:
        try:
            return socket.create_connection((addr, port), timeout=5)
        except OSError as ex:
            if time.monotonic() >= end:
                raise Failed(f'cannot connect to {addr}:{port} within {within} s: {ex}')
            time.sleep(0.1)


def client(args):
    dev = Device(args.dev, args.ip)
    names = args.only.split(',') if args.only else [s.name for s in SCENARIOS]
    for n in names:
        if n not in BY_NAME:
            raise Failed(f'unknown scenario {n!r} (known: {", ".join(BY_NAME)})')
    print(f'client: {args.dev} GID index {dev.gid_index} ({dev.gid}), server {args.server}:{args.port}',
          flush=True)
    ch = Channel(connect_tcp(args.server, args.port, args.connect_timeout))
    passed = failed = 0
    for n in names:
        sc = BY_NAME[n]
        res = Resources(dev)
        try:
            ch.send(op='setup', scenario=sc.name, peer=res.info())
            m = ch.recv()
            peer = m['peer']
            if n == names[0]:
                srv = m['server']
                print(f'server device {srv["device"]} ({"rverbs" if srv["rverbs"] else "not rverbs"}), '
                      f'kernel {srv["kernel"]}', flush=True)
            res.connect(peer, timeout=sc.timeout, retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry)
            start = time.monotonic()
            wcs, why = client_run(sc, res, peer, args.deadline)
            took = time.monotonic() - start
            ch.send(op='done')
            report = ch.recv()
            status, lines, more = judge(sc, res, dev, m['server'], report, wcs)
            why += more
        finally:
            res.close()
        lines += [f'server: {x}' for x in report['lines']]
        why += [f'server: {x}' for x in report['why']]
        label = f'{sc.name}: {sc.what} -> {wc_name(status)}'
        if why:
            failed += 1
            print(f'FAIL {label} ({took:.2f} s): {"; ".join(why)}', flush=True)
        else:
            passed += 1
            print(f'PASS {label} ({took:.2f} s)', flush=True)
        for x in lines:
            print(f'    {x}', flush=True)
    ch.send(op='bye')
    print(f'{passed} passed, {failed} failed', flush=True)
    return 1 if failed else 0


def unreachable(args):
    """RTR towards a GID nobody answers: refused with the neighbour's errno, QP in INIT."""
    from pyverbs.pyverbs_error import PyverbsRDMAError
    import errno
    res = Resources(Device(args.dev, args.ip))
    gid = ipaddress.IPv6Address('::ffff:' + args.server).exploded
    start = time.monotonic()
    try:
        res.connect({'qpn': 0x11, 'psn': 0, 'gid': gid})
    except PyverbsRDMAError as ex:
        took = time.monotonic() - start
        ok = ex.error_code in (errno.ETIMEDOUT, errno.EHOSTUNREACH) and res.state() == e.IBV_QPS_INIT
        print(f'{"PASS" if ok else "FAIL"} unreachable: modify_qp to RTR towards {args.server} failed '
              f'with errno {ex.error_code} after {took:.2f} s, QP state {res.state()}', flush=True)
        return 0 if ok else 1
    print(f'FAIL unreachable: modify_qp to RTR towards {args.server}, which nobody holds, succeeded', flush=True)
    return 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('role', choices=['server', 'client', 'unreachable'])
    p.add_argument('--dev', required=True, help='device name (rverbs0, rxe0)')
    p.add_argument('--ip', required=True, help='local IPv4 address whose RoCE v2 GID is used')
    p.add_argument('--port', type=int, default=18900, help='TCP port of the exchange')
    p.add_argument('--listen', default='0.0.0.0', help='server: address to listen on')
    p.add_argument('--server', help='client: the server\'s address')
    p.add_argument('--only', help='client: comma-separated scenario names')
    p.add_argument('--deadline', type=float, default=10.0, help='seconds to wait for a completion')
    p.add_argument('--accept-timeout', type=float, default=120.0)
    p.add_argument('--connect-timeout', type=float, default=60.0)
    args = p.parse_args()
    try:
        if args.role == 'server':
            return serve(args)
        if args.role == 'unreachable':
            return unreachable(args)
        if not args.server:
            p.error('client needs --server')
        return client(args)
    except Failed as ex:
        print(f'net_errors.py {args.role}: error: {ex}', flush=True)
        return 2


if __name__ == '__main__':
    sys.exit(main())
