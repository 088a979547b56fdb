/* leak-at-exit: a program that returns from main with its verbs objects alive. The
 * sanitizer lists them at exit with where each was created (the QP on the BUG line).
 * --fixed destroys everything first. */
#include "sanitizer.h"

int main(int argc, char **argv)
{
	struct side s;
	int fixed = fixed_run(argc, argv);

	make_side(&s, IBV_QPT_RC, 16, 16);
	REQUIRE(ibv_destroy_qp(s.qp) == 0, "ibv_destroy_qp");
	s.qp = make_qp(&s, IBV_QPT_RC, 16); /* BUG */
	printf("qpn 0x%x\n", s.qp->qp_num);
	if (fixed)
		free_side(&s);
	printf("done\n");
	return 0;
}
