#!/usr/bin/env bash
# test_prepare_images — nebula-train prepare --images (libcore/data/data_folder.c, docs/data.md):
#   - a generated ImageFolder tree (prepare_images_check.py gen: PNG RGB, grey, palette, RGBA,
#     16-bit, 1-bit; JPEG RGB, grey, CMYK, one named .png; shrunk, enlarged and kept sizes; a
#     nested folder, a hidden file, a README and a text file) at 1 and 2 ranks: classes,
#     labels and every pixel equal torchvision's ImageFolder + Resize(36) + CenterCrop(32)
#     (tolerance 0, derived in prepare_images_check.py), and the two files are the same bytes;
#     --size 0 against CenterCrop alone;
#   - nebula-train trains 2 steps of resnet18-cifar on the file (data_open accepts it);
#   - a truncated PNG, a truncated JPEG: exit 2 naming the path and libpng's / libjpeg's words,
#     an earlier file at the output unchanged, no temporary left; with --skip-corrupt at
#     2 ranks: both counted, and the file equals the one of the tree without them;
#   - no class folders, an empty class, the output onto an input, --size < --crop: exit 2.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
TRAIN=build/bin/nebula-train
CHK=validation/cli/prepare_images_check.py
$PY -c 'import PIL, torchvision, h5py' 2>/dev/null || { echo "SKIP: $PY lacks PIL, torchvision or h5py"; exit 77; }

T=$tmp/tree
$PY $CHK gen "$T" || { echo "FAIL - generating the tree"; exit 1; }
expect "1 rank: summary with the counts and the throughput" 0 "15 images of 32x32 (resize 36), 3 classes; skipped 2 other files, 0 corrupt" \
    -- $TRAIN prepare --images "$T" --out "$tmp/one.h5" --crop 32
check "1 rank: classes, labels, pixels equal torchvision's" $PY $CHK check "$tmp/one.h5" "$T" 36 32
expect "2 ranks" 0 "images/s on 2 ranks" -- $MPIRUN -np 2 $TRAIN prepare --images "$T" --out "$tmp/two.h5" --crop 32
check "1-rank and 2-rank files are the same bytes" cmp "$tmp/one.h5" "$tmp/two.h5"
expect "--size 0: crop only" 0 "(resize 0)" -- $TRAIN prepare --images "$T" --out "$tmp/crop.h5" --crop 32 --size 0
check "--size 0 equals CenterCrop(32) alone" $PY $CHK check "$tmp/crop.h5" "$T" 0 32
expect "nebula-train reads the set: 2 steps of resnet18-cifar" 0 "steps_run=2" -- $TRAIN --model resnet18-cifar \
    --set model.image_size=32 --data "$tmp/two.h5" --steps 2 --global-batch 4 --run-dir "$tmp/run" \
    --set train.threads=1 --set profile.mode=off

# --- corrupt images ----------------------------------------------------------------------
cp -r "$T" "$tmp/png" && head -c 300 "$T/cat/a_rgb.png" >"$tmp/png/cat/a_rgb.png"
cp -r "$T" "$tmp/jpg" && head -c 2000 "$T/dog/c_big.jpg" >"$tmp/jpg/dog/c_big.jpg"
echo "an earlier set" >"$tmp/keep.h5"
expect "truncated PNG: exit 2 naming it and libpng's reason" 2 "$tmp/png/cat/a_rgb.png: libpng: the file ends at byte 300" \
    -- $TRAIN prepare --images "$tmp/png" --out "$tmp/keep.h5" --crop 32
expect "truncated JPEG at 2 ranks: exit 2 naming it and libjpeg's reason" 2 "$tmp/jpg/dog/c_big.jpg: libjpeg: Premature end of JPEG file" \
    -- $MPIRUN -np 2 $TRAIN prepare --images "$tmp/jpg" --out "$tmp/keep.h5" --crop 32
check "the earlier file at the output is unchanged, no temporary left" \
    bash -c "[ \"\$(cat '$tmp/keep.h5')\" = 'an earlier set' ] && ! ls '$tmp'/keep.h5.tmp.* 2>/dev/null"
cp -r "$tmp/png" "$tmp/both" && cp "$tmp/jpg/dog/c_big.jpg" "$tmp/both/dog/c_big.jpg"
expect "--skip-corrupt at 2 ranks: both skipped and counted" 0 "13 images of 32x32 (resize 36), 3 classes; skipped 2 other files, 2 corrupt" \
    -- $MPIRUN -np 2 $TRAIN prepare --images "$tmp/both" --out "$tmp/skip.h5" --crop 32 --skip-corrupt
cp -r "$T" "$tmp/less" && rm "$tmp/less/cat/a_rgb.png" "$tmp/less/dog/c_big.jpg"
$TRAIN prepare --images "$tmp/less" --out "$tmp/less.h5" --crop 32 >/dev/null
check "--skip-corrupt's file equals the one of the tree without them" cmp "$tmp/skip.h5" "$tmp/less.h5"

# --- bad layouts and options -------------------------------------------------------------
mkdir -p "$tmp/flat" && cp "$T/cat/a_rgb.png" "$tmp/flat/"
expect "no class folders: exit 2" 2 "no class folders" -- $TRAIN prepare --images "$tmp/flat" --out "$tmp/x.h5"
cp -r "$T" "$tmp/empty" && mkdir "$tmp/empty/emu" && echo text >"$tmp/empty/emu/README"
expect "a class without images: exit 2 naming it" 2 "class folder $tmp/empty/emu holds no PNG or JPEG" \
    -- $TRAIN prepare --images "$tmp/empty" --out "$tmp/x.h5" --crop 32
cp -r "$T" "$tmp/self"
expect "the output onto an input: exit 2" 2 "--out $tmp/self/cat/a_rgb.png" \
    -- $TRAIN prepare --images "$tmp/self" --out "$tmp/self/cat/a_rgb.png" --crop 32
check "the input is unchanged" cmp "$T/cat/a_rgb.png" "$tmp/self/cat/a_rgb.png"
expect "--size smaller than --crop: exit 2" 2 "--size 30 is smaller than --crop 32" \
    -- $TRAIN prepare --images "$T" --out "$tmp/x.h5" --crop 32 --size 30
check "no failed run left a file or a temporary" bash -c "! ls '$tmp'/x.h5* 2>/dev/null"
finish
