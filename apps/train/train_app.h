/* train_app — the subcommands of nebula-train beside training (main.c dispatches). */
#ifndef NEBULA_TRAIN_APP_H
#define NEBULA_TRAIN_APP_H

extern const char train_usage[];  /* main.c: the usage text every subcommand prints on misuse */

int prepare_main(int argc, char **argv);  /* prepare.c: nebula-train prepare ... */
int prepare_images_main(int argc, char **argv);  /* prepare_images.c: nebula-train prepare --images DIR ... */

int sample_main(int argc, char **argv);   /* sample.c: nebula-train sample ... */

#endif
