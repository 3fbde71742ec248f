#pragma once
#include "callbacks/callback.h"
#include "core/registry.h"

namespace volt {

// Every callback selectable by name (`--callback "model_checkpoint:monitor=val_acc,mode=max"`).
// Users add their own with callback_registry().add(...) before building a Trainer.
Registry<Callback>& callback_registry();

}  // namespace volt
