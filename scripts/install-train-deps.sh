#!/bin/sh
# Dependencies of tools/train/ only (training the small default model and its corpus).
# Kept out of install-deps.sh on purpose: CI never trains, and python3-torch is large.
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends \
  python3-torch python3-numpy libopenblas0-openmp \
  bible-kjv bible-kjv-text sword-text-web fortunes fortunes-min
