/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tmpdir.h — throwaway directories for tests that need a file system
 * (the file: store): made under $TMPDIR (else /tmp) and removed whole,
 * so nothing of a run is left behind.
 */
#ifndef KVL_TEST_TMPDIR_H
#define KVL_TEST_TMPDIR_H

/* A new empty directory named after `tag` (free the result with
 * tmpdir_remove); asserts that it could be made. */
char *tmpdir_make(const char *tag);

/* Makes the directory parent/name (asserting) and returns its path in a
 * new string (free it). */
char *tmpdir_sub(const char *parent, const char *name);

/* Removes `path` and everything under it, then frees the string. */
void tmpdir_remove(char *path);

#endif
