/* elastic — nebula-train's heartbeat and elastic control file (RUN_DIR/heartbeat,
 * RUN_DIR/control, RUN_DIR/relaunch): the formats, the protocol and the one design
 * decision are described at the top of elastic.c. The state they change is
 * train_run's (train.h); train_loop calls these at step boundaries. */
#ifndef NEBULA_ELASTIC_H
#define NEBULA_ELASTIC_H

#include <stdbool.h>

#include "ckpt/ckpt.h"
#include "train.h"

/* Rank 0, at setup: creates RUN_DIR/heartbeat at its fixed size (STATUS_IO when it cannot). */
status train_heartbeat_open(train_run *r);
/* Every rank after each step (a no-op without the file): rewrites the heartbeat line. */
void train_heartbeat(train_run *r);
/* After a checkpoint load: the global batch and lr factor a control file set, or the config's. */
status train_elastic_resume(train_run *r, const ckpt_content *c);
/* Rank 0, every step: whether RUN_DIR/control is there (one stat). */
bool train_control_exists(const train_run *r);
/* Collective: rank 0 decides, every rank applies; a new world size only sets *relaunch. */
status train_control(train_run *r, int *relaunch);
/* Rank 0, after the checkpoint committed: RUN_DIR/relaunch, control renamed control.applied. */
status train_relaunch_write(train_run *r, int world);

#endif
