-- The oldest shipped schema (commit 6d281b3), on SQLite: what SQLModel.metadata.create_all
-- made of that commit's bot/store/models.py, from sqlite_master. Used by tests/store/test_migrations.py.

CREATE TABLE sessions (
	id INTEGER NOT NULL,
	"key" VARCHAR(255) NOT NULL,
	kind VARCHAR(16) NOT NULL,
	team_id VARCHAR(32),
	channel_id VARCHAR(32),
	thread_ts VARCHAR(32),
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	PRIMARY KEY (id)
);

CREATE INDEX ix_sessions_channel_id ON sessions (channel_id);

CREATE UNIQUE INDEX ix_sessions_key ON sessions ("key");

CREATE TABLE task_sequences (
	agent VARCHAR(64) NOT NULL,
	last INTEGER NOT NULL,
	PRIMARY KEY (agent)
);

CREATE TABLE processed_events (
	"key" VARCHAR(255) NOT NULL,
	created_at DATETIME NOT NULL,
	PRIMARY KEY ("key")
);

CREATE TABLE messages (
	id INTEGER NOT NULL,
	session_id INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	role VARCHAR(16) NOT NULL,
	content TEXT,
	tool_calls JSON,
	tool_call_id VARCHAR(128),
	name VARCHAR(128),
	created_at DATETIME NOT NULL,
	PRIMARY KEY (id),
	UNIQUE (session_id, seq),
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);

CREATE INDEX ix_messages_session_id ON messages (session_id);

CREATE TABLE tasks (
	id VARCHAR(128) NOT NULL,
	session_id INTEGER NOT NULL,
	channel_id VARCHAR(32),
	agent VARCHAR(64) NOT NULL,
	description VARCHAR(255) NOT NULL,
	prompt TEXT NOT NULL,
	background BOOLEAN NOT NULL,
	state VARCHAR(16) NOT NULL,
	started_by VARCHAR(32),
	result TEXT,
	error TEXT,
	prompt_tokens INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	delivered BOOLEAN NOT NULL,
	created_at DATETIME NOT NULL,
	finished_at DATETIME,
	PRIMARY KEY (id),
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);

CREATE INDEX ix_tasks_state ON tasks (state);

CREATE INDEX ix_tasks_session_id ON tasks (session_id);

CREATE INDEX ix_tasks_channel_id ON tasks (channel_id);

CREATE TABLE approvals (
	id VARCHAR(64) NOT NULL,
	session_id INTEGER NOT NULL,
	task_id VARCHAR(128),
	agent VARCHAR(64) NOT NULL,
	tool VARCHAR(64) NOT NULL,
	arguments TEXT NOT NULL,
	reason TEXT NOT NULL,
	state VARCHAR(16) NOT NULL,
	requested_by VARCHAR(32),
	decided_by VARCHAR(32),
	decided_at DATETIME,
	channel_id VARCHAR(32),
	message_ts VARCHAR(32),
	created_at DATETIME NOT NULL,
	PRIMARY KEY (id),
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);

CREATE INDEX ix_approvals_session_id ON approvals (session_id);

CREATE INDEX ix_approvals_state ON approvals (state);

CREATE TABLE task_log (
	id INTEGER NOT NULL,
	task_id VARCHAR(128) NOT NULL,
	line TEXT NOT NULL,
	created_at DATETIME NOT NULL,
	PRIMARY KEY (id),
	FOREIGN KEY(task_id) REFERENCES tasks (id)
);

CREATE INDEX ix_task_log_task_id ON task_log (task_id);
