/*
 * Layout dumper for tests/layout.rs.
 *
 * Compiled at test time against the *installed* rdma-core headers. The Rust test
 * generates layout_items.h: one V(expr) line per size, alignment, field offset, field
 * size, enum property and constant it mirrors; this program prints the C value of each,
 * in order, as "value<TAB>expr".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#define V(...) printf("%lld\t%s\n", (long long)(__VA_ARGS__), #__VA_ARGS__);

int main(void)
{
#include "layout_items.h"
	return 0;
}
