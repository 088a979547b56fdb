/* librverbs_free.so: the verbs sanitizer's watch of free(3) and realloc(3)
 * (docs/sanitizer.md, mr-memory-freed). Preloaded by `rverbs run --sanitize`
 * (LD_PRELOAD); it forwards every call to the allocator that comes after it, and first
 * hands the block being released to the drop-in libibverbs.so.1, which reports it if
 * a registered region covers any of it.
 *
 * A separate library, not a `free` exported by the drop-in: an exported `free` would
 * interpose on every program that uses the drop-in, sanitizing or not; preloaded, it is
 * there only when asked for. The drop-in's check is a weak reference, bound at start-up
 * when libibverbs.so.1 is in the program's global scope (linked with -libverbs); a
 * program that dlopens it (Python) is not watched. Calls made while the check runs on
 * the same thread (it allocates) go straight to the allocator.
 *
 * Built by scripts/build-dropin.sh: gcc -shared -fPIC -O2 -g -o librverbs_free.so
 * free_watch.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

void __rv_sanitizer_released(uintptr_t addr, size_t len) __attribute__((weak));
/* glibc's own entry points, for calls before the constructor found the next ones. */
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern size_t malloc_usable_size(void *);

static void (*next_free)(void *);
static void *(*next_realloc)(void *, size_t);
static size_t (*next_usable)(void *);
static __thread int checking;

__attribute__((constructor)) static void find_next(void)
{
	next_usable = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
	next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
}

static size_t usable(void *p)
{
	return next_usable ? next_usable(p) : malloc_usable_size(p);
}

/* [p + from, p + to) of a block is going back to the allocator. */
static void released(void *p, size_t from, size_t to)
{
	/* Not before the constructor ran: every library is relocated by then. */
	if (!next_free || !__rv_sanitizer_released || checking || to <= from)
		return;
	checking = 1;
	__rv_sanitizer_released((uintptr_t)p + from, to - from);
	checking = 0;
}

void free(void *p)
{
	if (p)
		released(p, 0, usable(p));
	if (next_free)
		next_free(p);
	else
		__libc_free(p);
}

void *realloc(void *p, size_t n)
{
	size_t old = p ? usable(p) : 0;
	void *q = next_realloc ? next_realloc(p, n) : __libc_realloc(p, n);

	if (!p)
		return q;
	if (q && q != p)
		released(p, 0, old); /* moved: the old block is free (already reused, maybe) */
	else if (!q && n == 0)
		released(p, 0, old); /* realloc(p, 0) freed it */
	else if (q == p)
		released(p, usable(q), old); /* shrunk in place: the tail went back */
	return q;
}
