//! The drop-in pair (`librdmacm.so.1` + `libibverbs.so.1`) under C programs and
//! unmodified Debian 12 binaries, through `LD_LIBRARY_PATH`:
//!
//! * a C program compiled against the installed `<rdma/rdma_cma.h>` and linked with
//!   `-lrdmacm -libverbs` gets rdma-core's answers from the functions that are real
//!   without the connection-manager engine (`rdma_event_str`, `rdma_getaddrinfo`,
//!   `rdma_get_devices`, the ports) and the rsockets' refusals;
//! * the shim finds `libibverbs.so.1` in its own directory when the program did not
//!   load one, and fails cleanly (one line on stderr) next to rdma-core's libibverbs;
//! * `rping`, `ucmatose`, `udaddy`, `ib_write_bw` and `librpma.so.0` load with
//!   `LD_BIND_NOW=1` (every import resolves at its version).
//!
//! Needs a C compiler, librdmacm-dev, rdmacm-utils, perftest and librpma0; a missing
//! one is a failure, not a skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::dropin_dir;

const NOT_RVERBS: &str = "librdmacm (rverbs): libibverbs.so.1 is not the rverbs drop-in";

/// Exercises the functions that are real today; prints one `key=value` line per check.
const SMOKE_C: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

int main(void)
{
	for (int e = RDMA_CM_EVENT_ADDR_RESOLVED; e <= RDMA_CM_EVENT_TIMEWAIT_EXIT + 1; e++)
		printf("event%d=%s\n", e, rdma_event_str(e));

	struct rdma_addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_family = AF_INET;
	hints.ai_port_space = RDMA_PS_TCP;
	int ret = rdma_getaddrinfo(NULL, "7471", &hints, &res);
	printf("passive_ret=%d\n", ret);
	if (!ret) {
		struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_src_addr;
		printf("passive=%d %d %d %#x %u %s %d %d\n", res->ai_flags, res->ai_family,
		       res->ai_qp_type, res->ai_port_space, (unsigned)res->ai_src_len,
		       inet_ntoa(sin->sin_addr), ntohs(sin->sin_port), res->ai_dst_addr == NULL);
		rdma_freeaddrinfo(res);
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_port_space = RDMA_PS_UDP;
	res = NULL;
	ret = rdma_getaddrinfo("127.0.0.1", "4791", &hints, &res);
	printf("active_ret=%d\n", ret);
	if (!ret) {
		struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_dst_addr;
		printf("active=%d %d %d %#x %s %d %d\n", res->ai_flags, res->ai_family,
		       res->ai_qp_type, res->ai_port_space, inet_ntoa(sin->sin_addr),
		       ntohs(sin->sin_port), res->ai_src_addr == NULL);
		rdma_freeaddrinfo(res);
	}

	errno = 0;
	ret = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	printf("einval=%d %d\n", ret, errno);

	int n = -1, m = -1;
	struct ibv_context **d1 = rdma_get_devices(&n);
	struct ibv_context **d2 = rdma_get_devices(&m);
	printf("devices=%d %d %s %d %d\n", n, m,
	       d1 && d1[0] ? ibv_get_device_name(d1[0]->device) : "-",
	       d1 && d2 && d1[0] == d2[0], d1 && d1[1] == NULL);
	rdma_free_devices(d1);
	rdma_free_devices(d2);

	struct rdma_cm_id id;
	memset(&id, 0, sizeof(id));
	struct sockaddr_in6 *src = (struct sockaddr_in6 *)&id.route.addr.src_addr;
	src->sin6_family = AF_INET6;
	src->sin6_port = htons(18515);
	printf("ports=%d %d\n", ntohs(rdma_get_src_port(&id)), rdma_get_dst_port(&id));

	errno = 0;
	ret = rsocket(AF_INET, SOCK_DGRAM, 0);
	printf("rsocket_dgram=%d %d\n", ret, errno);
	ret = rsocket(AF_INET, SOCK_STREAM, 0);
	printf("rsocket=%d\n", ret >= 0);
	int closed = rclose(ret);
	printf("rclose=%d\n", closed);
	errno = 0;
	closed = rclose(ret);
	printf("rclose_again=%d %d\n", closed, errno);
	errno = 0;
	long off = (long)riomap(99999, NULL, 0, 0, 0, 0);
	printf("riomap=%ld %d\n", off, errno);
	return 0;
}
"#;

/// Compiles `source` into `dir/name` with `cc <args>`.
fn compile(dir: &Path, name: &str, source: &str, args: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C source");
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "compiling {name}.c failed (librdmacm-dev installed?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of `key=` in the program's output.
fn value<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no `{key}=` in\n{stdout}"))
}

#[test]
fn c_program_gets_the_real_functions_through_the_pair() {
    let dir = dropin_dir("c_program_gets_the_real_functions_through_the_pair");
    let libdir = format!("-L{}", dir.display());
    let exe = compile(&dir, "smoke", SMOKE_C, &[&libdir, "-lrdmacm", "-libverbs"]);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("LD_BIND_NOW", "1")
        .output()
        .expect("run smoke");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stderr.contains(NOT_RVERBS), "{stderr}");

    let names = [
        "ADDR_RESOLVED",
        "ADDR_ERROR",
        "ROUTE_RESOLVED",
        "ROUTE_ERROR",
        "CONNECT_REQUEST",
        "CONNECT_RESPONSE",
        "CONNECT_ERROR",
        "UNREACHABLE",
        "REJECTED",
        "ESTABLISHED",
        "DISCONNECTED",
        "DEVICE_REMOVAL",
        "MULTICAST_JOIN",
        "MULTICAST_ERROR",
        "ADDR_CHANGE",
        "TIMEWAIT_EXIT",
    ];
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            value(&stdout, &format!("event{i}")),
            format!("RDMA_CM_EVENT_{n}")
        );
    }
    assert_eq!(value(&stdout, "event16"), "UNKNOWN EVENT");

    assert_eq!(value(&stdout, "passive_ret"), "0");
    // RAI_PASSIVE, AF_INET, IBV_QPT_RC (from SOCK_STREAM), RDMA_PS_TCP, 16 bytes.
    assert_eq!(value(&stdout, "passive"), "1 2 2 0x106 16 0.0.0.0 7471 1");
    assert_eq!(value(&stdout, "active_ret"), "0");
    // flags 0, AF_INET, IBV_QPT_UD, RDMA_PS_UDP.
    assert_eq!(value(&stdout, "active"), "0 2 4 0x111 127.0.0.1 4791 1");
    assert_eq!(value(&stdout, "einval"), format!("-1 {}", libc::EINVAL));

    assert_eq!(value(&stdout, "devices"), "1 1 rverbs0 1 1");
    assert_eq!(value(&stdout, "ports"), "18515 0");
    // rsockets: datagram sockets are not implemented (EOPNOTSUPP, never a fake
    // success); a stream socket opens and closes once; a number that is no rsocket
    // is EBADF.
    assert_eq!(value(&stdout, "rsocket_dgram"), format!("-1 {}", libc::EOPNOTSUPP));
    assert_eq!(value(&stdout, "rsocket"), "1");
    assert_eq!(value(&stdout, "rclose"), "0");
    assert_eq!(value(&stdout, "rclose_again"), format!("-1 {}", libc::EBADF));
    assert_eq!(value(&stdout, "riomap"), format!("-1 {}", libc::EBADF));
}

const EVENT_STR_C: &str = r#"
#include <stdio.h>
#include <rdma/rdma_cma.h>
int main(void)
{
	printf("%s\n", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED));
	return 0;
}
"#;

#[test]
fn shim_loads_the_libibverbs_of_its_own_directory() {
    // Linked with librdmacm only and run without LD_LIBRARY_PATH: nothing loads a
    // libibverbs.so.1 before the first call, and the loader's default would be
    // rdma-core's; the shim must take the one next to itself.
    let dir = dropin_dir("shim_loads_the_libibverbs_of_its_own_directory");
    let libdir = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let exe = compile(
        &dir,
        "event_str",
        EVENT_STR_C,
        &[&libdir, &rpath, "-lrdmacm"],
    );
    let out = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run event_str");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "RDMA_CM_EVENT_ESTABLISHED", "{stderr}");
    assert!(!stderr.contains(NOT_RVERBS), "{stderr}");
}

const MISMATCH_C: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>
int main(void)
{
	int n = 7;
	errno = 0;
	struct ibv_context **d = rdma_get_devices(&n);
	printf("devices=%d %d %d\n", d == NULL, n, errno);
	struct rdma_addrinfo *res = NULL;
	errno = 0;
	int ret = rdma_getaddrinfo("127.0.0.1", "1", NULL, &res);
	printf("getaddrinfo=%d %d\n", ret, errno);
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	printf("channel=%d %d\n", ch == NULL, errno);
	printf("event=%s\n", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED));
	return 0;
}
"#;

#[test]
fn next_to_rdma_core_libibverbs_calls_fail_cleanly() {
    // Only our librdmacm.so.1 on the path: the program loads rdma-core's
    // libibverbs.so.1, which has no __rv_* entry points.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("dropin")
        .join("next_to_rdma_core_libibverbs_calls_fail_cleanly");
    std::fs::create_dir_all(&dir).expect("create dir");
    for name in ["librdmacm.so.1", "librdmacm.so"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(common::our_lib(), &link).expect("symlink");
    }
    let libdir = format!("-L{}", dir.display());
    let exe = compile(
        &dir,
        "mismatch",
        MISMATCH_C,
        &[&libdir, "-lrdmacm", "-libverbs"],
    );
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("run mismatch");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(value(&stdout, "devices"), format!("1 0 {}", libc::ENODEV));
    assert_eq!(
        value(&stdout, "getaddrinfo"),
        format!("-1 {}", libc::ENODEV)
    );
    assert_eq!(value(&stdout, "channel"), format!("1 {}", libc::ENOSYS));
    assert_eq!(value(&stdout, "event"), "UNKNOWN EVENT");
    assert_eq!(stderr.matches(NOT_RVERBS).count(), 1, "{stderr}");
}

const CONSUMERS: [&str; 5] = [
    "/usr/bin/rping",
    "/usr/bin/ucmatose",
    "/usr/bin/udaddy",
    "/usr/bin/ib_write_bw",
    "/usr/lib/x86_64-linux-gnu/librpma.so.0",
];

#[test]
fn debian_consumers_resolve_every_import_against_the_pair() {
    let dir = dropin_dir("debian_consumers_resolve_every_import_against_the_pair");
    for bin in CONSUMERS {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing (install rdmacm-utils, perftest, librpma0)"
        );
        let out = Command::new("ldd")
            .args(["-r", bin])
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .output()
            .expect("run ldd");
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "ldd -r {bin}:\n{stdout}{stderr}");
        for t in [&stdout, &stderr] {
            assert!(
                !t.contains("undefined symbol") && !t.contains("not found"),
                "ldd -r {bin}:\n{stdout}{stderr}"
            );
        }
        for lib in ["librdmacm.so.1", "libibverbs.so.1"] {
            let expected = format!("{lib} => {}", dir.join(lib).display());
            assert!(
                stdout.contains(&expected),
                "{bin} does not use our {lib}:\n{stdout}"
            );
        }
    }
}

#[test]
fn debian_programs_run_their_usage_path() {
    let dir = dropin_dir("debian_programs_run_their_usage_path");
    for bin in &CONSUMERS[..4] {
        let out = Command::new(bin)
            .arg("-h")
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
        let (stdout, stderr) = text(&out);
        let all = format!("{stdout}{stderr}");
        assert!(
            !all.contains("symbol lookup error") && !all.contains("error while loading"),
            "{bin}:\n{all}"
        );
        // Each prints its usage, which names the program, and exits.
        let name = Path::new(bin).file_name().expect("name").to_string_lossy();
        assert!(all.contains(name.as_ref()), "{bin} -h:\n{all}");
    }
}
