/* mr-memory-unmapped: the program unmaps the pages of a registered region and only then
 * deregisters it. A NIC pinned those pages at ibv_reg_mr(3) and keeps their translation
 * until ibv_dereg_mr: between the munmap and the deregistration it would still read and
 * write the old pages, where the program no longer sees them. The sanitizer finds the
 * hole at the deregistration (or at the post of a work request naming the region).
 * --fixed deregisters first, then unmaps. */
#include <sys/mman.h>
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side a;
	struct ibv_mr *mr;
	int fixed = fixed_run(argc, argv);
	char *pages;

	make_side(&a, IBV_QPT_RC, 16, 16);
	pages = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(pages != MAP_FAILED, "mmap");
	mr = ibv_reg_mr(a.pd, pages, 2 * 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr != NULL, "ibv_reg_mr");
	printf("lkey 0x%x pages %p hole %p\n", mr->lkey, (void *)pages, (void *)(pages + 4096));
	fflush(stdout);
	if (fixed) {
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
		REQUIRE(munmap(pages, 2 * 4096) == 0, "munmap");
	} else {
		/* The bug: the second page goes while the region is registered ... */
		REQUIRE(munmap(pages + 4096, 4096) == 0, "munmap");
		/* ... and is found here. */
		REQUIRE(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr"); /* BUG */
		REQUIRE(munmap(pages, 4096) == 0, "munmap");
	}
	free_side(&a);
	printf("done\n");
	return 0;
}
