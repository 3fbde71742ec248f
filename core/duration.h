#pragma once
// Wall-clock budgets written as Lightning writes them, "DD:HH:MM:SS" (--max-time, the Timer
// callback, ModelCheckpoint's train_time_interval), and bounds written in seconds (--timeout).
#include <chrono>
#include <string>

#include "core/option_schema.h"

namespace volt {

// "DD:HH:MM:SS" (days unbounded, hours < 24, minutes and seconds < 60) as a duration; throws
// ConfigurationError naming `what` (e.g. "--max-time") when malformed.
std::chrono::seconds parse_duration(const std::string& text, const std::string& what);

// `duration` (>= 0) as "DD:HH:MM:SS", which parse_duration reads back.
std::string format_duration(std::chrono::seconds duration);

// A duration option's text form, for an OptionSchema.
TextForm<std::chrono::seconds> duration_form();

// A duration written in seconds, fractions allowed ("12.5"), kept to the millisecond (--timeout):
// an OptionSchema's text form. Rejects text that is not a finite number below 1e9 seconds.
TextForm<std::chrono::milliseconds> seconds_form();

}  // namespace volt
