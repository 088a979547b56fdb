//! The rdma_cm functions that are real without the connection-manager engine
//! (`src/cm`): `rdma_event_str` and the port getters compared call for call with the
//! installed rdma-core 44 `librdmacm.so.1` (`dlopen` + `dlvsym`), `rdma_getaddrinfo`
//! against rdma-core 44's documented behaviour (rdma-core's own needs a kernel RDMA
//! device, so it cannot be called here), `rdma_get_devices` against [`cm_context`].

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::ptr::{null, null_mut};

use ibverbs::abi::{ibv_context, Zeroed, IBV_QPT_RC, IBV_QPT_UD};
use ibverbs::cm::abi::*;
use ibverbs::cm::addr::{rdma_get_dst_port, rdma_get_src_port};
use ibverbs::cm::addrinfo::{rdma_freeaddrinfo, rdma_getaddrinfo};
use ibverbs::cm::context::{cm_context, rdma_free_devices, rdma_get_devices};
use ibverbs::cm::strs::rdma_event_str;
use ibverbs::device::ibv_get_device_name;
use ibverbs::ffi::{errno, set_errno};

const REAL_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// rdma-core's librdmacm, loaded privately (it pulls rdma-core's libibverbs.so.1 in
/// with it; neither is used for anything but the pure functions).
struct RealLib(*mut c_void);

impl RealLib {
    fn open() -> Self {
        assert!(
            Path::new(REAL_LIB).exists(),
            "{REAL_LIB} missing: install librdmacm1 (rdma-core 44)"
        );
        let path = CString::new(REAL_LIB).expect("path");
        // SAFETY: valid path; librdmacm has no constructor that touches devices.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen({REAL_LIB}) failed");
        RealLib(handle)
    }

    /// Resolves `name@RDMACM_1.0` as a function pointer of type `F`.
    ///
    /// # Safety
    ///
    /// `F` must be the `extern "C" fn` type of the real function.
    unsafe fn get<F: Copy>(&self, name: &str) -> F {
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        let n = CString::new(name).expect("name");
        // SAFETY: live handle, NUL-terminated strings.
        let sym = unsafe { libc::dlvsym(self.0, n.as_ptr(), c"RDMACM_1.0".as_ptr()) };
        assert!(!sym.is_null(), "{name}@RDMACM_1.0 not found in {REAL_LIB}");
        // SAFETY: caller contract: F is the function's type; sym is non-NULL.
        unsafe { std::mem::transmute_copy::<*mut c_void, F>(&sym) }
    }
}

fn text(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the functions under test return static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn event_str_equals_rdma_core() {
    let real = RealLib::open();
    // SAFETY: rdma_event_str's C type.
    let real_str: unsafe extern "C" fn(rdma_cm_event_type) -> *const c_char =
        unsafe { real.get("rdma_event_str") };
    let values = (0..=40).chain([100, 0x7fff_ffff, 0x8000_0000, u32::MAX]);
    for e in values {
        // SAFETY: takes any value.
        let (ours, theirs) = unsafe { (rdma_event_str(e), real_str(e)) };
        assert_eq!(text(ours), text(theirs), "event {e}");
    }
    // SAFETY: takes any value.
    unsafe {
        assert_eq!(
            text(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED)),
            "RDMA_CM_EVENT_ADDR_RESOLVED"
        );
        assert_eq!(
            text(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT)),
            "RDMA_CM_EVENT_TIMEWAIT_EXIT"
        );
        assert_eq!(text(rdma_event_str(16)), "UNKNOWN EVENT");
    }
}

/// A zeroed id whose source and destination are `src`/`dst` (raw sockaddr bytes).
fn id_with(src: &[u8], dst: &[u8]) -> Box<rdma_cm_id> {
    let mut id = Box::new(rdma_cm_id::zeroed());
    // SAFETY: both unions are 128-byte sockaddr_storage; the inputs are shorter.
    unsafe {
        let s = (&raw mut id.route.addr.src.src_storage).cast::<u8>();
        std::ptr::copy_nonoverlapping(src.as_ptr(), s, src.len());
        let d = (&raw mut id.route.addr.dst.dst_storage).cast::<u8>();
        std::ptr::copy_nonoverlapping(dst.as_ptr(), d, dst.len());
    }
    id
}

fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: reading the object representation of a plain C struct.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

fn sin(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    // SAFETY: plain C data, all-zero is valid.
    let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = port.to_be();
    s.sin_addr.s_addr = u32::from(ip).to_be();
    s
}

fn sin6(ip: Ipv6Addr, port: u16) -> libc::sockaddr_in6 {
    // SAFETY: plain C data, all-zero is valid.
    let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    s.sin6_port = port.to_be();
    s.sin6_addr.s6_addr = ip.octets();
    s
}

#[test]
fn ports_equal_rdma_core() {
    let real = RealLib::open();
    // SAFETY: the C types of the port getters.
    let (real_src, real_dst): (
        unsafe extern "C" fn(*mut rdma_cm_id) -> u16,
        unsafe extern "C" fn(*mut rdma_cm_id) -> u16,
    ) = unsafe { (real.get("rdma_get_src_port"), real.get("rdma_get_dst_port")) };

    let mut ib = sockaddr_ib::zeroed();
    ib.sib_family = AF_IB as u16;
    ib.sib_sid = (RDMA_IB_IP_PS_TCP | 4791).to_be();
    let mut unknown = sockaddr_ib::zeroed();
    unknown.sib_family = libc::AF_UNIX as u16;
    unknown.sib_sid = 0x1234u64.to_be();
    let cases: [(Vec<u8>, Vec<u8>, u16, u16); 4] = [
        (
            bytes_of(&sin(Ipv4Addr::LOCALHOST, 7471)).to_vec(),
            bytes_of(&sin(Ipv4Addr::new(10, 0, 0, 2), 18515)).to_vec(),
            7471,
            18515,
        ),
        (
            bytes_of(&sin6(Ipv6Addr::LOCALHOST, 1)).to_vec(),
            bytes_of(&sin6(Ipv6Addr::UNSPECIFIED, 65535)).to_vec(),
            1,
            65535,
        ),
        (bytes_of(&ib).to_vec(), bytes_of(&unknown).to_vec(), 4791, 0),
        (Vec::new(), Vec::new(), 0, 0),
    ];
    for (src, dst, src_port, dst_port) in cases {
        let mut id = id_with(&src, &dst);
        let p: *mut rdma_cm_id = &mut *id;
        // SAFETY: a valid id.
        unsafe {
            assert_eq!(rdma_get_src_port(p), src_port.to_be());
            assert_eq!(rdma_get_dst_port(p), dst_port.to_be());
            assert_eq!(rdma_get_src_port(p), real_src(p));
            assert_eq!(rdma_get_dst_port(p), real_dst(p));
        }
    }
    // SAFETY: NULL is refused.
    unsafe { assert_eq!(rdma_get_src_port(null_mut()), 0) };
}

/// The result of `rdma_getaddrinfo`, freed on drop.
struct Res(*mut rdma_addrinfo);

impl Drop for Res {
    fn drop(&mut self) {
        // SAFETY: from rdma_getaddrinfo, freed once.
        unsafe { rdma_freeaddrinfo(self.0) };
    }
}

impl Res {
    fn get(&self) -> &rdma_addrinfo {
        // SAFETY: a live result.
        unsafe { &*self.0 }
    }
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// `rdma_getaddrinfo(node, service, hints)`: the result, or the return value and errno.
fn gai(
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<&rdma_addrinfo>,
) -> Result<Res, (c_int, c_int)> {
    let (node, service) = (node.map(c), service.map(c));
    let mut res: *mut rdma_addrinfo = null_mut();
    set_errno(0);
    // SAFETY: NUL-terminated strings or NULL; hints NULL or valid; res valid.
    let ret = unsafe {
        rdma_getaddrinfo(
            node.as_ref().map_or(null(), |s| s.as_ptr()),
            service.as_ref().map_or(null(), |s| s.as_ptr()),
            hints.map_or(null(), |h| h as *const rdma_addrinfo),
            &mut res,
        )
    };
    if ret == 0 {
        assert!(!res.is_null());
        Ok(Res(res))
    } else {
        Err((ret, errno()))
    }
}

fn hints(flags: c_int, family: c_int, qp_type: u32, ps: u32) -> rdma_addrinfo {
    let mut h = rdma_addrinfo::zeroed();
    h.ai_flags = flags;
    h.ai_family = family;
    h.ai_qp_type = qp_type as c_int;
    h.ai_port_space = ps as c_int;
    h
}

/// The IPv4 address and port of a returned address.
fn v4(addr: *const libc::sockaddr, len: libc::socklen_t) -> (Ipv4Addr, u16) {
    assert!(!addr.is_null());
    assert_eq!(len as usize, size_of::<libc::sockaddr_in>());
    // SAFETY: an AF_INET result of len bytes.
    let s = unsafe { &*addr.cast::<libc::sockaddr_in>() };
    assert_eq!(c_int::from(s.sin_family), libc::AF_INET);
    (
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )
}

fn assert_single_without_extras(r: &rdma_addrinfo) {
    assert!(r.ai_next.is_null(), "only the first result is converted");
    assert!(r.ai_route.is_null() && r.ai_route_len == 0);
    assert!(r.ai_connect.is_null() && r.ai_connect_len == 0);
    assert!(r.ai_src_canonname.is_null() && r.ai_dst_canonname.is_null());
}

#[test]
fn getaddrinfo_ipv4_passive() {
    let h = hints(RAI_PASSIVE, libc::AF_INET, 0, RDMA_PS_TCP);
    let res = gai(None, Some("7471"), Some(&h)).expect("passive lookup");
    let r = res.get();
    assert_eq!(r.ai_flags, RAI_PASSIVE);
    assert_eq!(r.ai_family, libc::AF_INET);
    assert_eq!(
        r.ai_qp_type, IBV_QPT_RC as c_int,
        "SOCK_STREAM from RDMA_PS_TCP"
    );
    assert_eq!(r.ai_port_space, RDMA_PS_TCP as c_int);
    assert_eq!(
        v4(r.ai_src_addr, r.ai_src_len),
        (Ipv4Addr::UNSPECIFIED, 7471)
    );
    assert!(r.ai_dst_addr.is_null() && r.ai_dst_len == 0);
    assert_single_without_extras(r);
}

#[test]
fn getaddrinfo_ipv4_active_numeric_host() {
    let h = hints(RAI_NUMERICHOST, libc::AF_INET, IBV_QPT_RC, RDMA_PS_TCP);
    let res = gai(Some("127.0.0.1"), Some("18515"), Some(&h)).expect("active lookup");
    let r = res.get();
    assert_eq!(r.ai_flags, 0, "only RAI_PASSIVE survives into the result");
    assert_eq!(r.ai_family, libc::AF_INET);
    assert_eq!(r.ai_qp_type, IBV_QPT_RC as c_int);
    assert_eq!(r.ai_port_space, RDMA_PS_TCP as c_int);
    assert_eq!(
        v4(r.ai_dst_addr, r.ai_dst_len),
        (Ipv4Addr::LOCALHOST, 18515)
    );
    assert!(r.ai_src_addr.is_null() && r.ai_src_len == 0);
    assert_single_without_extras(r);
}

#[test]
fn getaddrinfo_without_hints_defaults_to_rc_tcp() {
    // NULL hints are passed to getaddrinfo as NULL (glibc then applies AI_ADDRCONFIG,
    // which can refuse even 127.0.0.1 on a host without a configured IPv4 address).
    let (node, service) = (c("127.0.0.1"), c("7471"));
    let mut list = null_mut();
    // SAFETY: valid strings, NULL hints.
    let glibc = unsafe { libc::getaddrinfo(node.as_ptr(), service.as_ptr(), null(), &mut list) };
    if glibc != 0 {
        assert_eq!(
            gai(Some("127.0.0.1"), Some("7471"), None)
                .err()
                .map(|e| e.0),
            Some(glibc)
        );
        return;
    }
    // SAFETY: from getaddrinfo.
    unsafe { libc::freeaddrinfo(list) };
    let res = gai(Some("127.0.0.1"), Some("7471"), None).expect("lookup");
    let r = res.get();
    assert_eq!(r.ai_flags, 0);
    assert_eq!(r.ai_qp_type, IBV_QPT_RC as c_int);
    assert_eq!(r.ai_port_space, RDMA_PS_TCP as c_int);
    assert_eq!(v4(r.ai_dst_addr, r.ai_dst_len), (Ipv4Addr::LOCALHOST, 7471));
}

#[test]
fn getaddrinfo_ud_hints_give_a_datagram_result() {
    // No port space in the hints: it comes from the result's protocol (UDP).
    let h = hints(RAI_NUMERICHOST, 0, IBV_QPT_UD, 0);
    let res = gai(Some("127.0.0.1"), Some("4791"), Some(&h)).expect("lookup");
    let r = res.get();
    assert_eq!(r.ai_qp_type, IBV_QPT_UD as c_int);
    assert_eq!(r.ai_port_space, RDMA_PS_UDP as c_int);
    assert_eq!(v4(r.ai_dst_addr, r.ai_dst_len), (Ipv4Addr::LOCALHOST, 4791));
}

#[test]
fn getaddrinfo_port_string_without_node() {
    // Active, no node: the loopback address (AI_PASSIVE not set).
    let h = hints(0, libc::AF_INET, 0, RDMA_PS_TCP);
    let res = gai(None, Some("65000"), Some(&h)).expect("lookup");
    let r = res.get();
    assert_eq!(
        v4(r.ai_dst_addr, r.ai_dst_len),
        (Ipv4Addr::LOCALHOST, 65000)
    );
}

#[test]
fn getaddrinfo_ipv6_loopback() {
    let h = hints(RAI_NUMERICHOST, 0, IBV_QPT_RC, RDMA_PS_TCP);
    let res = gai(Some("::1"), Some("7471"), Some(&h)).expect("lookup");
    let r = res.get();
    assert_eq!(r.ai_family, libc::AF_INET6);
    assert_eq!(r.ai_dst_len as usize, size_of::<libc::sockaddr_in6>());
    // SAFETY: an AF_INET6 result of the right size.
    let s = unsafe { &*r.ai_dst_addr.cast::<libc::sockaddr_in6>() };
    assert_eq!(c_int::from(s.sin6_family), libc::AF_INET6);
    assert_eq!(Ipv6Addr::from(s.sin6_addr.s6_addr), Ipv6Addr::LOCALHOST);
    assert_eq!(u16::from_be(s.sin6_port), 7471);
    assert_single_without_extras(r);
}

#[test]
fn getaddrinfo_copies_the_hint_addresses() {
    let src = sin(Ipv4Addr::new(192, 0, 2, 1), 0);
    let dst = sin(Ipv4Addr::new(192, 0, 2, 2), 7471);
    let mut h = hints(0, libc::AF_INET, IBV_QPT_RC, RDMA_PS_TCP);
    h.ai_src_addr = (&raw const src).cast_mut().cast();
    h.ai_src_len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    h.ai_dst_addr = (&raw const dst).cast_mut().cast();
    h.ai_dst_len = size_of::<libc::sockaddr_in>() as libc::socklen_t;

    // No node, no service: the result is the hints (flags, family, types, dst).
    let res = gai(None, None, Some(&h)).expect("hints only");
    let r = res.get();
    assert_eq!((r.ai_flags, r.ai_family), (0, libc::AF_INET));
    assert_eq!(r.ai_qp_type, IBV_QPT_RC as c_int);
    assert_eq!(r.ai_port_space, RDMA_PS_TCP as c_int);
    assert_eq!(
        v4(r.ai_dst_addr, r.ai_dst_len),
        (Ipv4Addr::new(192, 0, 2, 2), 7471)
    );
    assert_eq!(
        v4(r.ai_src_addr, r.ai_src_len),
        (Ipv4Addr::new(192, 0, 2, 1), 0)
    );
    assert_ne!(
        r.ai_src_addr, h.ai_src_addr,
        "a copy, not the caller's pointer"
    );

    // A lookup keeps its own destination and takes the hints' source.
    let res = gai(Some("127.0.0.1"), Some("1"), Some(&h)).expect("lookup");
    let r = res.get();
    assert_eq!(v4(r.ai_dst_addr, r.ai_dst_len), (Ipv4Addr::LOCALHOST, 1));
    assert_eq!(
        v4(r.ai_src_addr, r.ai_src_len),
        (Ipv4Addr::new(192, 0, 2, 1), 0)
    );
}

/// glibc's own answer for `getaddrinfo(node, service, hints)`.
fn libc_gai(node: &str, service: &str, flags: c_int, family: c_int) -> c_int {
    let (node, service) = (c(node), c(service));
    // SAFETY: plain C data, all-zero is valid.
    let mut h: libc::addrinfo = unsafe { std::mem::zeroed() };
    h.ai_flags = flags;
    h.ai_family = family;
    h.ai_socktype = libc::SOCK_STREAM;
    h.ai_protocol = libc::IPPROTO_TCP;
    let mut res = null_mut();
    // SAFETY: valid strings and hints.
    let ret = unsafe { libc::getaddrinfo(node.as_ptr(), service.as_ptr(), &h, &mut res) };
    if ret == 0 {
        // SAFETY: from getaddrinfo.
        unsafe { libc::freeaddrinfo(res) };
    }
    ret
}

#[test]
fn getaddrinfo_error_codes() {
    // Nothing to resolve: -1 with EINVAL.
    assert_eq!(gai(None, None, None).err(), Some((-1, libc::EINVAL)));

    // getaddrinfo failures come back as glibc's EAI_* code, unchanged.
    let h = hints(RAI_NUMERICHOST, 0, IBV_QPT_RC, RDMA_PS_TCP);
    let (ret, _) = gai(Some("not-an-address"), Some("7471"), Some(&h))
        .err()
        .expect("fails");
    assert_eq!(ret, libc::EAI_NONAME);
    assert_eq!(
        ret,
        libc_gai("not-an-address", "7471", libc::AI_NUMERICHOST, 0)
    );

    let (ret, _) = gai(Some("127.0.0.1"), Some("no-such-service-rverbs"), Some(&h))
        .err()
        .expect("fails");
    assert!(ret < 0, "an EAI_* code, not -1/errno: {ret}");
    assert_eq!(
        ret,
        libc_gai(
            "127.0.0.1",
            "no-such-service-rverbs",
            libc::AI_NUMERICHOST,
            0
        )
    );

    let h4 = hints(RAI_NUMERICHOST, libc::AF_INET, IBV_QPT_RC, RDMA_PS_TCP);
    let (ret, _) = gai(Some("::1"), Some("7471"), Some(&h4))
        .err()
        .expect("fails");
    assert_eq!(
        ret,
        libc_gai("::1", "7471", libc::AI_NUMERICHOST, libc::AF_INET)
    );

    // AF_IB conversion (RAI_FAMILY + RAI_NUMERICHOST): the soft device has no native
    // IB addressing.
    let hib = hints(RAI_FAMILY | RAI_NUMERICHOST, AF_IB, IBV_QPT_RC, RDMA_PS_IB);
    let (ret, _) = gai(Some("::1"), Some("7471"), Some(&hib))
        .err()
        .expect("fails");
    assert_eq!(ret, libc::EAI_FAMILY);
    // Without RAI_FAMILY, AF_IB means "any family" (rdma-core): an IP result.
    let hany = hints(RAI_NUMERICHOST, AF_IB, IBV_QPT_RC, RDMA_PS_TCP);
    let res = gai(Some("127.0.0.1"), Some("7471"), Some(&hany)).expect("lookup");
    assert_eq!(res.get().ai_family, libc::AF_INET);
}

#[test]
fn get_devices_returns_the_one_cm_context() {
    let ctx = cm_context();
    assert!(!ctx.is_null(), "cm_context: errno {}", errno());
    assert_eq!(cm_context(), ctx, "opened once, cached forever");
    // SAFETY: a live context of ours.
    let name = unsafe { CStr::from_ptr(ibv_get_device_name((*ctx).device)) };
    assert_eq!(name.to_str().expect("utf-8"), "rverbs0");

    let mut n: c_int = -1;
    // SAFETY: valid out-parameter.
    let list = unsafe { rdma_get_devices(&mut n) };
    assert!(!list.is_null());
    assert_eq!(n, 1);
    // SAFETY: a NULL-terminated array of n contexts.
    let (first, end): (*mut ibv_context, *mut ibv_context) = unsafe { (*list, *list.add(1)) };
    assert_eq!(first, ctx);
    assert!(end.is_null());
    // SAFETY: NULL num_devices is allowed.
    let again = unsafe { rdma_get_devices(null_mut()) };
    assert!(!again.is_null());
    // SAFETY: as above.
    assert_eq!(unsafe { *again }, ctx);
    // SAFETY: arrays from rdma_get_devices, freed once; NULL is a no-op.
    unsafe {
        rdma_free_devices(list);
        rdma_free_devices(again);
        rdma_free_devices(null_mut());
    }
    assert_eq!(cm_context(), ctx, "freeing the list keeps the context");
}
