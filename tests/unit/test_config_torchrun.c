/*
 * test_config_torchrun.c - under torchrun (TORCHELASTIC_RUN_ID set) the rendezvous store takes
 * MASTER_PORT + 1, since torchrun's own store holds MASTER_PORT; WEFT_MASTER_PORT is not set
 * here. The configuration is read once per process, so this case has a process of its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "util/config.h"

int main(void)
{
    unsetenv("WEFT_MASTER_PORT");
    setenv("MASTER_PORT", "31234", 1);
    setenv("TORCHELASTIC_RUN_ID", "test-run", 1);
    int port = weft_config_get()->master_port;
    if (port != 31235) {
        printf("FAIL: master_port %d under torchrun with MASTER_PORT=31234, expected 31235\n",
               port);
        return 1;
    }
    return 0;
}
