#!/usr/bin/env bash
# test_config_migrate — config schema versions on the real trainer (docs/compat.md):
#   every config the previous release shipped (validation/fixtures/config/v1, copies of
#   configs/ before the renames of config_version 2) migrates automatically (exit 0), the
#   report names each renamed key with FILE:LINE, the migrated file equals the one in
#   configs/ now, and old and migrated files resolve to the same config (--print-config);
#   old names still load with one deprecation warning per key on rank 0 of an mpirun, and
#   through --set and `nebula-train control`; a run's stored config uses the new names;
#   migrate-config's refusals (exit 2).
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
v1=validation/fixtures/config/v1

# the renames each shipped file holds (file: old -> new at line)
declare -A want=(
    [train/gpt2-tiny-licenses.ini]="train.clip -> train.max_grad_norm (@:17)|ckpt.keep -> ckpt.keep_last (@:34)"
    [train/resnet18-digits.ini]="train.clip -> train.max_grad_norm (@:18)"
)
bad=0
for old in $v1/models/*.ini $v1/train/*.ini; do
    rel=${old#$v1/}
    new=$tmp/${rel//\//-}
    $TRAIN migrate-config "$old" -o "$new" >$tmp/report 2>&1
    rc=$?
    report=$(sed 's/  */ /g' $tmp/report)
    IFS='|' read -ra keys <<<"${want[$rel]:-}"
    for k in "${keys[@]}"; do grep -qF -- "converted ${k/@/$old}" <<<"$report" || { echo "    $rel: no '${k/@/$old}' in the report"; bad=1; }; done
    grep -qF "${#keys[@]} converted, 0 defaulted, 0 impossible" <<<"$report" || { echo "    $rel: counts: $(tail -1 $tmp/report)"; bad=1; }
    [ $rc -eq 0 ] || { echo "    $rel: exit $rc"; bad=1; }
    cmp -s "$new" "configs/$rel" || { echo "    $rel: migrated file differs from configs/$rel"; diff "$new" "configs/$rel" | head -5; bad=1; }
    $TRAIN --config "$old" --print-config >$tmp/a.ini 2>/dev/null && $TRAIN --config "$new" --print-config >$tmp/b.ini \
        && cmp -s $tmp/a.ini $tmp/b.ini || { echo "    $rel: resolved configs differ"; diff $tmp/a.ini $tmp/b.ini | head -5; bad=1; }
done
check "every shipped trainer config of v1 migrates (exit 0, report, equals configs/, same resolved config)" [ $bad -eq 0 ]
# nebula-bench's own configs have no renamed key: they still load, to the same config
bad=0
for f in bench-comm.ini demo-comm.ini; do
    build/bin/nebula-bench comm --config $v1/$f --print-config >$tmp/a.ini && \
        build/bin/nebula-bench comm --config configs/$f --print-config >$tmp/b.ini && cmp -s $tmp/a.ini $tmp/b.ini || bad=1
done
check "nebula-bench's v1 configs load unchanged" [ $bad -eq 0 ]

old=$v1/train/gpt2-tiny-licenses.ini
$MPIRUN -np 2 $TRAIN --config $old --set train.clip=0.5 --print-config >$tmp/out 2>$tmp/err </dev/null
check "an old file loads through the aliases (train.clip and --set train.clip = 0.5 -> max_grad_norm)" \
    grep -qx "max_grad_norm = 0.5" $tmp/out
check "... one warning per key on 2 ranks, naming FILE:LINE, the old and the new key" \
    [ "$(grep -c "$old:17: train.clip is deprecated since config_version 2; it is now train.max_grad_norm" $tmp/err)" = 1 -a \
      "$(grep -c deprecated $tmp/err)" = 2 ]
expect "--set with an old name warns naming --set" 0 "--set train.zero=1: train.zero is deprecated since config_version 2; it is now zero.stage" -- \
    $TRAIN --set train.zero=1 --print-config
$TRAIN --set train.zero=1 --print-config 2>/dev/null | sed -n '/^\[zero\]/,/^$/p' >$tmp/zero
check "... and sets the new key (zero.stage = 1)" grep -qx "stage = 1" $tmp/zero
check "--print-config writes the version first" [ "$($TRAIN --print-config | head -2 | tr '\n' ' ')" = "[nebula] config_version = 2 " ]
licenses_data
$MPIRUN -np 2 $TRAIN --config $old --run-dir $tmp/old-run --steps 1 --set optim.warmup_steps=0 --set data.train=$data/train.bin --set data.val= \
    --set ckpt.every_steps=1 >$tmp/old-run.log 2>&1 </dev/null
check "a run from the old file stores its config (config.ini, the checkpoint's) under the new names, versioned" \
    bash -c "grep -A1 -x '\[nebula\]' $tmp/old-run/config.ini | grep -qx 'config_version = 2' &&
             grep -qx 'max_grad_norm = 1' $tmp/old-run/config.ini && grep -qx 'keep_last = 2' $tmp/old-run/config.ini &&
             ! grep -qE '^(clip|keep) =' $tmp/old-run/config.ini && build/bin/nebula-ckpt info $tmp/old-run/ckpt/step_00000001 2>&1 | grep -q 'max_grad_norm = 1'"
$TRAIN control $tmp/old-run --set train.clip=0.5 >/dev/null 2>&1
check "control with an old name asks the run for the new one" grep -rq "train.max_grad_norm" $tmp/old-run/reload

cp $old $tmp/inplace.ini
expect "migrate-config refuses to overwrite OLD without --in-place (exit 2)" 2 "pass --in-place" -- \
    $TRAIN migrate-config $tmp/inplace.ini -o $tmp/inplace.ini
check "... and leaves it as it was" cmp -s $old $tmp/inplace.ini
expect "migrate-config --in-place rewrites it" 0 "2 converted" -- $TRAIN migrate-config $tmp/inplace.ini --in-place
check "... to the current file" cmp -s $tmp/inplace.ini configs/train/gpt2-tiny-licenses.ini
printf '[train]\nclip = 1\nstepz = 3\n' >$tmp/bad.ini
expect "an unknown key: exit 2 naming FILE:LINE, nothing written" 2 "bad.ini:3: unknown key 'train.stepz'" -- \
    $TRAIN migrate-config $tmp/bad.ini -o $tmp/bad-new.ini
check "... no output file" [ ! -e $tmp/bad-new.ini ]
expect "migrate-config without -o or --in-place: usage, exit 2" 2 "one of -o NEW.ini or --in-place" -- $TRAIN migrate-config $old
printf '[nebula]\nconfig_version = 3\n' >$tmp/v3.ini
expect "a file of a newer version is refused (exit 2) with the versions known" 2 "expected an integer in [1, 2]" -- \
    $TRAIN --config $tmp/v3.ini --print-config
finish
