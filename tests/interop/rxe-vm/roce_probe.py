#!/usr/bin/env python3
"""Host-side RoCEv2 probe for the rxe guest (run inside the guest's network namespace).

  roce_probe.py gsi-ping IFACE SRC_IP DST_IP [TIMEOUT]
      Sends a management datagram (UD SEND_ONLY to QP1, GSI Q_Key, a Performance
      Management Get(ClassPortInfo) MAD) to DST_IP:4791 with a correct ICRC and waits
      for the guest kernel's reply on IFACE (raw capture, so the IPv4 ID the ICRC covers
      is visible). Nothing in the guest serves that class, so its MAD layer answers
      GetResp with status "unsupported method/attribute" and the same transaction id.
      Exit 0 when a reply with a valid ICRC and our transaction id arrives.

  roce_probe.py rc-peer IFACE LOCAL_IP GUEST_IP [TIMEOUT]
      Plays the server side of ibv_rc_pingpong's TCP exchange (port 18515 on LOCAL_IP;
      prints "listening" once it listens) with a made-up QPN 0x11 and PSN 0x22, then waits
      for the guest client's first RC packet on IFACE: it must go to QP 0x11, carry the PSN
      the client announced and have a valid ICRC. No QP exists on this side, so the
      client gets no ACK; the caller ends it.

  roce_probe.py capture IFACE SRC_IP [TIMEOUT]
      Waits for one RoCEv2 packet (UDP dport 4791) from SRC_IP on IFACE, checks its ICRC
      and prints its BTH. Exit 0 when one arrived with a valid ICRC.

The ICRC rule (docs/rocev2-wire.md §2): CRC-32 over 8 bytes of 0xFF, then the
IPv4 header with TOS, TTL and checksum set to all ones, the UDP header with the checksum
set to all ones, the BTH with byte 4 set to all ones, then the rest up to the ICRC; sent
little-endian. The sender uses an unconnected UDP socket with IP_PMTUDISC_DO, for which
the kernel sends IPv4 ID 0 and DF, so the ICRC can be computed before sending.
"""
import os
import socket
import struct
import sys
import time
import zlib

ROCE_PORT = 4791
GSI_QKEY = 0x80010000
ETH_P_ALL = 0x0003
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2


def icrc(ip_udp_bth_rest: bytes) -> bytes:
    """The ICRC of a packet given from its IPv4 header up to (not including) the ICRC."""
    b = bytearray(ip_udp_bth_rest)
    ihl = (b[0] & 0x0F) * 4
    b[1] = 0xFF                        # TOS
    b[8] = 0xFF                        # TTL
    b[10:12] = b"\xff\xff"             # IPv4 header checksum
    b[ihl + 6:ihl + 8] = b"\xff\xff"   # UDP checksum
    b[ihl + 8 + 4] = 0xFF              # BTH byte 4: FECN, BECN, resv6a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)


def check_vectors():
    """V1 of docs/rocev2-wire.md §2.4, so a broken ICRC here cannot pass as a guest failure."""
    wire = bytes.fromhex("45000034123440004011a531c0a80101c0a80102c12312b7002000000430ffff"
                         "000000118000010068656c6c6f00000078fcce4e")
    assert icrc(wire[:-4]) == wire[-4:], "ICRC self-check failed"


def parse_roce(frame: bytes, src_ip: str):
    """(ip_packet, bth) if frame is Ethernet/IPv4/UDP:4791 from src_ip, else None."""
    if len(frame) < 14 + 20 + 8 + 12 + 4 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[0] >> 4 != 4 or ip[9] != 17 or socket.inet_ntoa(ip[12:16]) != src_ip:
        return None
    total = struct.unpack("!H", ip[2:4])[0]
    ip = ip[:total]
    if struct.unpack("!H", ip[ihl + 2:ihl + 4])[0] != ROCE_PORT:
        return None
    return ip, ip[ihl + 8:ihl + 20]


def describe(ip: bytes) -> str:
    ihl = (ip[0] & 0x0F) * 4
    bth = ip[ihl + 8:ihl + 20]
    ok = icrc(ip[:-4]) == ip[-4:]
    return ("%s:%d -> %s:%d ipid=0x%04x opcode=0x%02x pkey=0x%04x dqp=0x%06x psn=0x%06x "
            "len=%d icrc=%s" % (
                socket.inet_ntoa(ip[12:16]), struct.unpack("!H", ip[ihl:ihl + 2])[0],
                socket.inet_ntoa(ip[16:20]), struct.unpack("!H", ip[ihl + 2:ihl + 4])[0],
                struct.unpack("!H", ip[4:6])[0], bth[0], struct.unpack("!H", bth[2:4])[0],
                int.from_bytes(bth[5:8], "big"), int.from_bytes(bth[9:12], "big"),
                len(ip), "ok" if ok else "BAD"))


def raw_socket(iface: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, 0))
    return s


def gsi_ping(iface, src_ip, dst_ip, timeout):
    tid = os.urandom(8)
    # MAD header (24 bytes) + 232 bytes of data: base version 1, class 0x04
    # (Performance Management), class version 1, method 0x01 Get, attribute 0x0001
    # ClassPortInfo.
    mad = struct.pack("!BBBBHH8sHHI", 1, 0x04, 1, 0x01, 0, 0, tid, 0x0001, 0, 0)
    mad += bytes(256 - len(mad))
    bth = struct.pack("!BBHB3sB3s", 0x64, 0, 0xFFFF, 0, (1).to_bytes(3, "big"), 0,
                      (0).to_bytes(3, "big"))
    deth = struct.pack("!IB3s", GSI_QKEY, 0, (1).to_bytes(3, "big"))
    payload = bth + deth + mad
    udp_len = 8 + len(payload) + 4
    # What the kernel will put on the wire for this socket: ID 0, DF, no options.
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    udph = struct.pack("!HHHH", ROCE_PORT, ROCE_PORT, udp_len, 0)
    datagram = payload + icrc(iph + udph + payload)

    cap = raw_socket(iface)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    tx.bind((src_ip, ROCE_PORT))   # also absorbs the reply (no ICMP port unreachable)
    deadline = time.monotonic() + timeout
    next_send = 0.0
    sent = 0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_send:       # UD is unreliable: resend each second
            tx.sendto(datagram, (dst_ip, ROCE_PORT))
            sent += 1
            next_send = now + 1.0
        cap.settimeout(max(0.01, min(next_send, deadline) - time.monotonic()))
        try:
            frame = cap.recv(65535)
        except socket.timeout:
            continue
        got = parse_roce(frame, dst_ip)
        if got is None:
            continue
        ip, bth = got
        print("reply: " + describe(ip))
        ihl = (ip[0] & 0x0F) * 4
        m = ip[ihl + 8 + 12 + 8:]   # after UDP, BTH and DETH
        if icrc(ip[:-4]) != ip[-4:]:
            print("error: the reply's ICRC is wrong")
            return 1
        if bth[0] != 0x64 or int.from_bytes(bth[5:8], "big") != 1 or m[8:16] != tid:
            print("note: not the reply to our MAD, waiting on")
            continue
        print("mad: class 0x%02x method 0x%02x status 0x%04x attr 0x%04x (sent %d request%s)" % (
            m[1], m[3], struct.unpack("!H", m[4:6])[0], struct.unpack("!H", m[16:18])[0],
            sent, "" if sent == 1 else "s"))
        if m[3] != 0x81:
            print("error: expected method 0x81 GetResp")
            return 1
        return 0
    print("error: no reply within %s s (%d requests sent)" % (timeout, sent))
    return 1


def rc_peer(iface, local_ip, guest_ip, timeout):
    fake_qpn, fake_psn = 0x11, 0x22
    deadline = time.monotonic() + timeout
    cap = raw_socket(iface)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((local_ip, 18515))
    ls.listen(1)
    print("listening", flush=True)
    ls.settimeout(timeout)
    conn, peer = ls.accept()
    conn.settimeout(max(0.1, deadline - time.monotonic()))
    # "LID:QPN:PSN:GID" as %04x:%06x:%06x:32 hex digits, NUL-terminated (52 bytes).
    msg = b""
    while len(msg) < 52:
        chunk = conn.recv(52 - len(msg))
        if not chunk:
            break
        msg += chunk
    fields = msg.rstrip(b"\0").decode().split(":")
    print("client %s said lid=%s qpn=%s psn=%s gid=%s" % (peer[0], *fields))
    client_psn = int(fields[2], 16)
    gid = bytes(10) + b"\xff\xff" + socket.inet_aton(local_ip)
    conn.sendall(b"%04x:%06x:%06x:%s\0" % (0, fake_qpn, fake_psn, gid.hex().encode()))
    while time.monotonic() < deadline:
        cap.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            frame = cap.recv(65535)
        except socket.timeout:
            break
        got = parse_roce(frame, guest_ip)
        if got is None:
            continue
        ip, bth = got
        print("captured: " + describe(ip))
        dqp, psn = int.from_bytes(bth[5:8], "big"), int.from_bytes(bth[9:12], "big")
        if bth[0] >> 5 != 0 or dqp != fake_qpn or psn != client_psn:
            print("error: expected an RC packet to QP 0x%x with PSN 0x%x" % (fake_qpn, client_psn))
            return 1
        if icrc(ip[:-4]) != ip[-4:]:
            print("error: the packet's ICRC is wrong")
            return 1
        return 0
    print("error: no RC packet from %s within %s s" % (guest_ip, timeout))
    return 1


def capture(iface, src_ip, timeout):
    cap = raw_socket(iface)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cap.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            frame = cap.recv(65535)
        except socket.timeout:
            break
        got = parse_roce(frame, src_ip)
        if got is None:
            continue
        ip, _ = got
        print("captured: " + describe(ip))
        return 0 if icrc(ip[:-4]) == ip[-4:] else 1
    print("error: no RoCEv2 packet from %s within %s s" % (src_ip, timeout))
    return 1


def main(argv):
    check_vectors()
    if len(argv) >= 4 and argv[0] == "gsi-ping":
        return gsi_ping(argv[1], argv[2], argv[3], float(argv[4]) if len(argv) > 4 else 10)
    if len(argv) >= 4 and argv[0] == "rc-peer":
        return rc_peer(argv[1], argv[2], argv[3], float(argv[4]) if len(argv) > 4 else 20)
    if len(argv) >= 3 and argv[0] == "capture":
        return capture(argv[1], argv[2], float(argv[3]) if len(argv) > 3 else 10)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
