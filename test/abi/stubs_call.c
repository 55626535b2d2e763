/* The stub vendor providers (src/abi/stubs, docs/library.md "Verbs ABI")
   fail every call as rdma-core does for a device that is not theirs, and
   read none of their arguments: each pointer passed here is to a page that
   cannot be read. The function types are the installed headers'.
     stubs_call OUR_LIBMLX5_SO_1 OUR_LIBEFA_SO_1 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef void (*fn)(void);
static int failures;

/* NAME at VERSION (NULL: its default) in LIB; a missing one ends the test. */
static fn sym(void *lib, const char *name, const char *version) {
  void *p = version ? dlvsym(lib, name, version) : dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "FAIL: %s@%s: %s\n", name, version ? version : "", dlerror());
    exit(1);
  }
  fn f;
  memcpy(&f, &p, sizeof f); /* ISO C has no cast from void * to a function */
  return f;
}
/* The symbol, typed as the header declares it. */
#define SYM(lib, name, version) ((__typeof__(name) *)sym(lib, #name, version))

/* GOT, and errno when WANT_ERRNO is not 0, as expected. */
static void expect(const char *call, long got, long want, int want_errno) {
  if (got == want && (!want_errno || errno == want_errno)) return;
  fprintf(stderr, "FAIL: %s returned %ld (errno %d), expected %ld (errno %d)\n", call, got, errno, want,
          want_errno);
  failures++;
}

static void mlx5(void *lib, void *bad) {
  expect("mlx5dv_is_supported", SYM(lib, mlx5dv_is_supported, "MLX5_1.8")(bad), 0, 0);
  errno = 0;
  expect("mlx5dv_open_device", (long)SYM(lib, mlx5dv_open_device, "MLX5_1.7")(bad, bad), 0, EOPNOTSUPP);
  expect("mlx5dv_query_device", SYM(lib, mlx5dv_query_device, "MLX5_1.0")(bad, bad), EOPNOTSUPP, 0);
  expect("mlx5dv_init_obj@@MLX5_1.2", SYM(lib, mlx5dv_init_obj, "MLX5_1.2")(bad, MLX5DV_OBJ_QP), EOPNOTSUPP, 0);
  expect("mlx5dv_init_obj@MLX5_1.0", SYM(lib, mlx5dv_init_obj, "MLX5_1.0")(bad, MLX5DV_OBJ_CQ), EOPNOTSUPP, 0);
  errno = 0;
  expect("mlx5dv_devx_get_event", SYM(lib, mlx5dv_devx_get_event, NULL)(bad, bad, 64), -1, EOPNOTSUPP);
  errno = 0;
  expect("mlx5dv_vfio_get_events_fd", SYM(lib, mlx5dv_vfio_get_events_fd, NULL)(bad), -1, EOPNOTSUPP);
  errno = 0;
  expect("mlx5dv_dr_action_create_drop", (long)SYM(lib, mlx5dv_dr_action_create_drop, NULL)(), 0, EOPNOTSUPP);
  SYM(lib, mlx5dv_pp_free, NULL)(bad);
}

static void efa(void *lib, void *bad) {
  expect("efadv_query_device",
         SYM(lib, efadv_query_device, "EFA_1.1")(bad, bad, sizeof(struct efadv_device_attr)), EOPNOTSUPP, 0);
  errno = 0;
  expect("efadv_create_cq",
         (long)SYM(lib, efadv_create_cq, "EFA_1.2")(bad, bad, bad, sizeof(struct efadv_cq_init_attr)), 0,
         EOPNOTSUPP);
  errno = 0;
  expect("efadv_create_driver_qp", (long)SYM(lib, efadv_create_driver_qp, "EFA_1.0")(bad, bad, 0), 0,
         EOPNOTSUPP);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBMLX5_SO_1 LIBEFA_SO_1\n", argv[0]);
    return 2;
  }
  void *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (bad == MAP_FAILED) {
    perror("FAIL: mmap");
    return 1;
  }
  void *libs[2];
  for (int i = 0; i < 2; i++) {
    libs[i] = dlopen(argv[i + 1], RTLD_NOW | RTLD_LOCAL);
    if (!libs[i]) {
      fprintf(stderr, "FAIL: %s\n", dlerror());
      return 1;
    }
  }
  mlx5(libs[0], bad);
  efa(libs[1], bad);
  for (int i = 0; i < 2; i++) dlclose(libs[i]);
  if (failures) return 1;
  printf("PASS: the mlx5dv_ and efadv_ calls fail (EOPNOTSUPP), reading no argument\n");
  return 0;
}
