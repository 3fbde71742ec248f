# c10d's Gloo process group header includes <gloo/...>, and Note [Inline all_reduce] may call
# Gloo's library itself. Both volt's own build (torch_features.cmake) and the installed package
# (voltConfig.cmake) look for them here, so that an installed volt finds them where the user's
# machine has them rather than where the machine that built volt had them.
# Sets VOLT_GLOO_INCLUDE_DIR (…-NOTFOUND when missing) and VOLT_GLOO_LIBRARY.
find_path(VOLT_GLOO_INCLUDE_DIR gloo/rendezvous/store.h HINTS ${TORCH_INCLUDE_DIRS})
find_library(VOLT_GLOO_LIBRARY NAMES gloo)
set(VOLT_GLOO_MISSING_MESSAGE "volt: gloo headers (gloo/rendezvous/store.h) not found. "
                              "On Debian install libgloo-dev (volt's tools/setup.sh does).")
