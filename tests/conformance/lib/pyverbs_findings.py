#!/usr/bin/python3
"""The sanitizer's findings in a verbose run of pyverbs (run_pyverbs.sh under
RVERBS_SANITIZE=1, reports on stderr beside unittest's lines), each attributed to the test
that was running, checked against the findings docs/sanitizer.md ("Correct programs: no finding") explains.

usage: pyverbs_findings.py LOG

Prints "TEST: KIND" for each finding not explained (nothing when all are) and, on stderr,
how many findings of each kind were read. Exits 1 when the log holds no finding at all:
the suite's error-path tests always provoke some, so none means the sanitizer was off.
"""
import collections
import re
import sys

# (kind) -> the tests (module.Class.test) whose finding of that kind is explained.
EXPLAINED = {
    # Error paths the suite drives on purpose.
    "post-in-bad-state": {
        "test_qpex.QpExTestCase.test_post_receive_qp_state_bad_flow",
        "test_qpex.QpExTestCase.test_post_send_qp_state_bad_flow",
    },
    "remote-access-explained": {
        "test_qpex.QpExTestCase.test_qp_ex_rc_bind_mw",
        "test_mr.MRTest.test_mr_rereg_access_bad_flow",
        "test_mr.MWTest.test_invalidate_mw_type1",
        "test_mr.MWTest.test_mw_type2_invalidate_dealloc",
        "test_mr.MWTest.test_mw_type2_invalidate_local",
        "test_mr.MWTest.test_mw_type2_invalidate_remote",
        "test_atomic.AtomicTest.test_atomic_invalid_mr_access",
        "test_atomic.AtomicTest.test_atomic_invalid_rkey",
    },
    # Rules the suite's resources break by design.
    "cq-too-small": {
        "test_cqex.CqExTestCase.test_xrc_traffic_cq_ex",
        "test_qpex.QpExTestCase.test_qp_ex_xrc_send",
        "test_qpex.QpExTestCase.test_qp_ex_xrc_send_imm",
        "test_atomic.AtomicTest.test_xrc_atomic_cmp_and_swap",
        "test_atomic.AtomicTest.test_xrc_atomic_fetch_and_add",
        "test_odp.OdpTestCase.test_odp_xrc_traffic",
        "test_cq.CQTest.test_resize_cq",
        "test_tag_matching.TMTest.test_tm_no_tag",
        "test_tag_matching.TMTest.test_tm_rndv",
        "test_tag_matching.TMTest.test_tm_traffic",
        "test_tag_matching.TMTest.test_tm_unexpected_tag",
    },
    "dereg-mr-in-use": {
        "test_cq_events.CqEventsTestCase.test_cq_events_rc",
        "test_cq_events.CqEventsTestCase.test_cq_events_ud",
        "test_cqex.CqExTestCase.test_rc_traffic_cq_ex",
        "test_cqex.CqExTestCase.test_ud_traffic_cq_ex",
        "test_parent_domain.ParentDomainTrafficTest.test_mem_align_srq_excq_rc_traffic",
        "test_odp.OdpTestCase.test_odp_async_prefetch_rc_traffic",
        "test_odp.OdpTestCase.test_odp_rc_srq_traffic",
        "test_odp.OdpTestCase.test_odp_sync_prefetch_rc_traffic",
    },
    "rereg-mr-in-use": {
        "test_mr.MRTest.test_mr_rereg_addr",
        "test_mr.MRTest.test_mr_rereg_pd",
    },
}


def main() -> int:
    current = None
    kinds = collections.Counter()
    with open(sys.argv[1], errors="replace") as log:
        for line in log:
            m = re.match(r"^(test_\w+) \(tests\.([\w.]+)\)", line)
            if m:
                current = m.group(2)
            for f in re.finditer(r"==\d+==RVERBS SANITIZER: ([a-z-]+)", line):
                kinds[f.group(1)] += 1
                if current not in EXPLAINED.get(f.group(1), ()):
                    print(f"{current}: {f.group(1)}")
    print(", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no finding", file=sys.stderr)
    return 0 if kinds else 1


if __name__ == "__main__":
    sys.exit(main())
