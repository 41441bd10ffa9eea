/* floor: the least a launcher can do to cage a command with Landlock and seccomp, for the
 * benchmarks' "physical floor". Landlock: read and execute beneath /, nothing else handled
 * beyond that; seccomp: arch check plus one rule (socket(AF_UNIX) -> EPERM). Then execve.
 * Not a sandbox: a yardstick. Usage: floor PROG [ARGS...] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    struct landlock_ruleset_attr attr = {
        .handled_access_fs = (1ULL << 13) - 1,
    };
    int rs = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr.handled_access_fs), 0);
    if (rs < 0) { perror("landlock_create_ruleset"); return 125; }
    struct landlock_path_beneath_attr pb = {
        .allowed_access = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE |
                          LANDLOCK_ACCESS_FS_READ_DIR,
        .parent_fd = open("/", O_PATH | O_CLOEXEC),
    };
    if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0)) { perror("add_rule"); return 125; }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) { perror("nnp"); return 125; }
    if (syscall(SYS_landlock_restrict_self, rs, 0)) { perror("restrict_self"); return 125; }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xC000003E, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1 /* AF_UNIX */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) { perror("seccomp"); return 125; }
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}
