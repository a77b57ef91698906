/* SPDX-License-Identifier: MIT */
/* The engine object, /org/agentxpu/Engine: its properties and methods. */
#pragma once

#include "context.h"

extern const sd_bus_vtable engine_vtable[];

int engine_object_register(Context *c);
