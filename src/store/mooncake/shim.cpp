// SPDX-License-Identifier: Apache-2.0
//
// shim.cpp — kvlink's Mooncake shim (shim.h): byte-range reads inside get
// sessions and range puts inside put sessions, through Mooncake's C++
// client (RealClient). Built only against Mooncake's headers and archives,
// into the one library that also carries Mooncake's C API (see
// docs/mooncake.md), with the flags Mooncake's client was built with: the
// class layouts must agree.
//
// Holds. RealClient keeps one get session per key and client, and ending
// it ends it for every caller. The shim counts holds per key so that
// concurrent batches of one process that share a key (two engines' loads
// of one prefix) do not end each other's sessions.
//
// Puts. RealClient refuses a put session for a key that has one already
// (a concurrent put of it in this process). The shim makes such a put wait
// for the other one, which then either stored the key (the wait's put
// finds it there) or did not (the wait's put stores it).

#include "shim.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "real_client.h"
#include "types.h"

namespace {

// What mooncake_store_create returns (store_c.cpp, the same commit): the
// shared pointer is its only member.
struct StoreHandle {
	std::shared_ptr<mooncake::RealClient> client;
};

mooncake::RealClient *real(void *client)
{
	return static_cast<StoreHandle *>(client)->client.get();
}

int code(mooncake::ErrorCode e)
{
	return static_cast<int>(mooncake::toInt(e));
}

// Hold counts, per client and key.
std::mutex holds_mu;
std::unordered_map<void *, std::unordered_map<std::string, long>> holds;

// Starts sessions for keys and counts one hold each where it started.
void hold_keys(void *client, const std::vector<std::string> &keys,
               int *results)
{
	std::vector<int> r = real(client)->batch_get_session_start(keys);
	std::lock_guard<std::mutex> g(holds_mu);
	auto &h = holds[client];
	for (size_t i = 0; i < keys.size(); i++) {
		results[i] = i < r.size() ? r[i] : code(mooncake::ErrorCode::INVALID_PARAMS);
		if (results[i] == 0)
			h[keys[i]]++;
	}
}

// Holds keys for one read: counts a hold where the key is held already,
// and starts a session (a master call) only where it is not.
void hold_for_read(void *client, const std::vector<std::string> &keys,
                   int *results)
{
	std::vector<std::string> start;
	std::vector<size_t> at;
	{
		std::lock_guard<std::mutex> g(holds_mu);
		auto &h = holds[client];
		for (size_t i = 0; i < keys.size(); i++) {
			auto it = h.find(keys[i]);
			results[i] = 0;
			if (it != h.end()) {
				it->second++;
				continue;
			}
			start.push_back(keys[i]);
			at.push_back(i);
		}
	}
	if (start.empty())
		return;
	std::vector<int> r(start.size());
	hold_keys(client, start, r.data());
	for (size_t j = 0; j < start.size(); j++)
		results[at[j]] = r[j];
}

// Lets go of one hold of each key, and ends the sessions no hold is left
// on. The end runs under the counts' lock (it makes no master call), so a
// hold counted after it starts a session of its own. A session that a
// start racing with an end loses anyway (RealClient drops it) reads as
// INVALID_PARAMS, which kvl_mc_get_ranges renews and reads again.
void release_keys(void *client, const std::vector<std::string> &keys)
{
	std::vector<std::string> ended;
	std::lock_guard<std::mutex> g(holds_mu);
	auto &h = holds[client];
	for (const auto &k : keys) {
		auto it = h.find(k);
		if (it == h.end() || --it->second > 0)
			continue;
		h.erase(it);
		ended.push_back(k);
	}
	if (!ended.empty())
		real(client)->batch_get_session_end(ended);
}

// Keys being put, per client.
std::mutex puts_mu;
std::condition_variable puts_cv;
std::unordered_map<void *, std::unordered_set<std::string>> putting;

// Marks a call's keys as being put, once none of them is: all at once, so
// that two calls waiting on each other's keys cannot deadlock.
struct PutClaim {
	void *client;
	const std::vector<std::string> &keys;
	PutClaim(void *c, const std::vector<std::string> &k) : client(c), keys(k)
	{
		std::unique_lock<std::mutex> g(puts_mu);
		auto &p = putting[client];
		puts_cv.wait(g, [&] {
			for (const auto &key : keys)
				if (p.count(key))
					return false;
			return true;
		});
		p.insert(keys.begin(), keys.end());
	}
	~PutClaim()
	{
		std::lock_guard<std::mutex> g(puts_mu);
		auto &p = putting[client];
		for (const auto &key : keys)
			p.erase(key);
		puts_cv.notify_all();
	}
};

std::vector<std::string> strings(const char *const *keys, size_t n)
{
	return std::vector<std::string>(keys, keys + n);
}

} // namespace

extern "C" {

int kvl_mc_shim_version(void)
{
	return KVL_MC_SHIM_VERSION;
}

int kvl_mc_hold(void *client, const char *const *keys, size_t n,
                int *results)
{
	try {
		hold_keys(client, strings(keys, n), results);
		return 0;
	} catch (...) {
		return -1;
	}
}

void kvl_mc_release(void *client, const char *const *keys, size_t n)
{
	try {
		release_keys(client, strings(keys, n));
	} catch (...) {
	}
}

int kvl_mc_get_ranges(void *client, const char *const *keys, size_t n,
                      const size_t *counts, void *const *bufs,
                      const size_t *lens, const uint64_t *offs,
                      int64_t *results)
{
	try {
		const int invalid = code(mooncake::ErrorCode::INVALID_PARAMS);
		const int expired = code(mooncake::ErrorCode::LEASE_EXPIRED);
		std::vector<std::string> k = strings(keys, n);
		std::vector<size_t> first(n);
		for (size_t i = 0, at = 0; i < n; at += counts[i++])
			first[i] = at;
		// Held for the call: a session of its own where the key had
		// none, and a count where it had, so that a concurrent release
		// does not end the session under this read.
		std::vector<int> held(n);
		hold_for_read(client, k, held.data());
		std::vector<std::string> release;
		std::vector<size_t> todo;
		for (size_t i = 0; i < n; i++) {
			results[i] = held[i];
			if (held[i] == 0) {
				release.push_back(k[i]);
				if (counts[i])
					todo.push_back(i);
			}
		}
		// The keys whose lease ran out, and those whose session another
		// caller's failed start dropped (INVALID_PARAMS, which a range
		// beyond the object gives too, and gives again), are renewed and
		// read once more, each alone: the batch as a whole outlasted the
		// lease, one key is likelier not to.
		auto read = [&](const std::vector<size_t> &which) {
			std::vector<std::string> tk;
			std::vector<std::vector<void *>> b;
			std::vector<std::vector<size_t>> l, o;
			for (size_t i : which) {
				size_t at = first[i], c = counts[i];
				tk.push_back(k[i]);
				b.emplace_back(bufs + at, bufs + at + c);
				l.emplace_back(lens + at, lens + at + c);
				o.emplace_back(offs + at, offs + at + c);
			}
			std::vector<int> r =
				real(client)->batch_get_into_multi_buffer_ranges(tk, b, l, o);
			for (size_t j = 0; j < which.size(); j++)
				results[which[j]] = j < r.size() ? r[j] : invalid;
		};
		if (!todo.empty())
			read(todo);
		for (size_t i : todo) {
			if (results[i] != expired && results[i] != invalid)
				continue;
			int renewed;
			hold_keys(client, {k[i]}, &renewed);
			results[i] = renewed;
			if (renewed != 0)
				continue;
			release.push_back(k[i]);
			read({i});
		}
		release_keys(client, release);
		return 0;
	} catch (...) {
		return -1;
	}
}

int kvl_mc_put_ranges(void *client, const char *const *keys, size_t n,
                      const uint64_t *sizes, const char *const *groups,
                      size_t replicas, const size_t *counts,
                      void *const *bufs, const size_t *lens,
                      const uint64_t *offs, int *results)
{
	try {
		mooncake::RealClient *c = real(client);
		std::vector<std::string> k = strings(keys, n);
		PutClaim claim(client, k);
		std::vector<size_t> sz(sizes, sizes + n);
		mooncake::ReplicateConfig cfg;
		cfg.replica_num = replicas;
		if (groups)
			cfg.group_ids = strings(groups, n);
		std::vector<int> started = c->batch_put_session_start(k, sz, cfg);
		// The started ones are written; the rest keep start's result.
		std::vector<std::string> wk;
		std::vector<std::vector<void *>> b;
		std::vector<std::vector<size_t>> l, o;
		std::vector<size_t> idx;
		for (size_t i = 0, at = 0; i < n; at += counts[i++]) {
			results[i] = i < started.size() ? started[i]
			             : code(mooncake::ErrorCode::INVALID_PARAMS);
			if (results[i] != 0)
				continue;
			wk.push_back(k[i]);
			b.emplace_back(bufs + at, bufs + at + counts[i]);
			l.emplace_back(lens + at, lens + at + counts[i]);
			o.emplace_back(offs + at, offs + at + counts[i]);
			idx.push_back(i);
		}
		if (wk.empty())
			return 0;
		std::vector<int> w = c->batch_put_from_multi_buffer_ranges(wk, b, l, o);
		std::vector<std::string> seal, revoke;
		std::vector<size_t> seal_idx;
		for (size_t j = 0; j < wk.size(); j++) {
			int e = j < w.size() ? w[j] : code(mooncake::ErrorCode::INVALID_PARAMS);
			if (e < 0) {
				results[idx[j]] = e;
				revoke.push_back(wk[j]);
			} else {
				seal.push_back(wk[j]);
				seal_idx.push_back(idx[j]);
			}
		}
		if (!revoke.empty())
			c->batch_put_session_revoke(revoke);
		if (!seal.empty()) {
			std::vector<int> e = c->batch_put_session_end(seal);
			std::vector<std::string> unsealed;
			for (size_t j = 0; j < seal.size(); j++) {
				results[seal_idx[j]] = j < e.size() ? e[j]
				                       : code(mooncake::ErrorCode::RPC_FAIL);
				if (results[seal_idx[j]] != 0)
					unsealed.push_back(seal[j]);
			}
			// An end that failed leaves the session for a retry; kvlink
			// does not retry, so it gives the object up.
			if (!unsealed.empty())
				c->batch_put_session_revoke(unsealed);
		}
		return 0;
	} catch (...) {
		return -1;
	}
}

void kvl_mc_forget(void *client)
{
	{
		std::lock_guard<std::mutex> g(holds_mu);
		holds.erase(client);
	}
	std::lock_guard<std::mutex> g(puts_mu);
	putting.erase(client);
}

} // extern "C"
