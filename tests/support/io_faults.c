/*
 * A ZooKeeper server's disk, faulted (issue 53): preloaded into the server's JVM
 * (LD_PRELOAD), it makes fsync and fdatasync take as long as the control file says (a slow
 * disk under the transaction log), and writes to regular files fail with ENOSPC while it says
 * the disk is full. The control file (named by ZKCRON_IO_FAULTS) holds
 * "fsync_ms=<n> enospc=<0|1>" and is read again at most every 100 ms; without it, nothing is
 * faulted. Built by tests/support/zk_cluster.rs with the system's C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static long fsync_ms;
static int enospc;
static struct timespec read_at;

static long ms_since(const struct timespec *then, const struct timespec *now) {
    return (now->tv_sec - then->tv_sec) * 1000 + (now->tv_nsec - then->tv_nsec) / 1000000;
}

/* The faults in force, from the control file read at most every 100 ms. */
static void refresh(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (read_at.tv_sec != 0 && ms_since(&read_at, &now) < 100) {
        return;
    }
    read_at = now;
    const char *path = getenv("ZKCRON_IO_FAULTS");
    if (path == NULL) {
        return;
    }
    FILE *file = fopen(path, "re");
    if (file == NULL) {
        return;
    }
    long ms = 0;
    int full = 0;
    if (fscanf(file, "fsync_ms=%ld enospc=%d", &ms, &full) == 2) {
        fsync_ms = ms;
        enospc = full;
    }
    fclose(file);
}

static void slow_sync(void) {
    refresh();
    if (fsync_ms > 0) {
        struct timespec wait = {fsync_ms / 1000, (fsync_ms % 1000) * 1000000};
        while (nanosleep(&wait, &wait) == -1 && errno == EINTR) {
        }
    }
}

/* Whether a write to `fd` fails for a full disk: a regular file, while the disk is full. */
static int full(int fd) {
    int saved = errno;
    refresh();
    struct stat st;
    int regular = enospc && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    errno = saved;
    return regular;
}

typedef int (*sync_fn)(int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name, type) \
    static type real_##name; \
    if (real_##name == NULL) real_##name = (type)dlsym(RTLD_NEXT, #name)

int fsync(int fd) {
    REAL(fsync, sync_fn);
    slow_sync();
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, sync_fn);
    slow_sync();
    return real_fdatasync(fd);
}

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write, write_fn);
    if (full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite, pwrite_fn);
    if (full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64, pwrite_fn);
    if (full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev, writev_fn);
    if (full(fd)) {
        errno = ENOSPC;
        return -1;
    }
    return real_writev(fd, iov, iovcnt);
}
