/* SPDX-License-Identifier: MIT */
#include "test.h"
int main(void) { TEST_EXIT(); }
