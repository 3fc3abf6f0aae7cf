//! MySQL's packets as the replication connection carries them: a 3-byte little-endian length
//! and a sequence byte, then the payload; a payload of 2^24 - 1 bytes continues in the next
//! packet (MySQL's client/server protocol, "MySQL Packets"). A binlog event's payload starts
//! with the OK byte (0x00); the server's end of a non-blocking dump is an EOF packet (0xFE,
//! shorter than 9 bytes); an error packet (0xFF) carries its code and message.

/// One whole payload.
pub enum Packet {
    /// The status byte (0x00), then the event.
    Event(Vec<u8>),
    Eof,
    /// The error code and its message (after the SQL state, where the server sent one).
    Error(u16, Vec<u8>),
    /// A result set's row (any payload that is neither its end nor an error).
    Row(Vec<u8>),
    /// Anything else in a binlog stream.
    Other,
}

const MAX_PAYLOAD: usize = 0xFF_FFFF;

/// The bytes read so far, and the payloads framed from them (driver, per read).
#[derive(Default)]
pub struct Frames {
    buffer: Vec<u8>,
    start: usize,
    /// Payloads pushed whole (replays), ahead of the buffer's.
    whole: std::collections::VecDeque<Vec<u8>>,
}

impl Frames {
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buffer.len() {
            self.buffer.clear();
            self.start = 0;
        } else if self.start > (1 << 20) {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(data);
    }

    pub fn push_payload(&mut self, payload: &[u8]) {
        self.whole.push_back(payload.to_vec());
    }

    /// The next whole payload of a binlog stream, or None until more bytes arrive.
    pub fn next_packet(&mut self) -> Option<Packet> {
        let payload = match self.whole.pop_front() {
            Some(payload) => payload,
            None => self.next_payload()?,
        };
        Some(match classify(payload) {
            Packet::Row(payload) if payload.first() == Some(&0x00) => Packet::Event(payload),
            Packet::Row(_) => Packet::Other,
            packet => packet,
        })
    }

    /// The next whole payload of a result set: its end, an error, or a row (None: read more).
    pub fn next_row(&mut self) -> Option<Packet> {
        Some(classify(self.next_payload()?))
    }

    fn next_payload(&mut self) -> Option<Vec<u8>> {
        // a payload of MAX_PAYLOAD bytes continues in the next packet
        let mut at = self.start;
        let mut pieces = Vec::new();
        loop {
            let header = self.buffer.get(at..at + 4)?;
            let length = usize::from(header[0])
                | (usize::from(header[1]) << 8)
                | (usize::from(header[2]) << 16);
            let body = self.buffer.get(at + 4..at + 4 + length)?;
            pieces.push((at + 4, at + 4 + length));
            at += 4 + length;
            if body.len() < MAX_PAYLOAD {
                break;
            }
        }
        let mut payload = Vec::with_capacity(pieces.iter().map(|(a, b)| b - a).sum());
        for (from, to) in pieces {
            payload.extend_from_slice(&self.buffer[from..to]);
        }
        self.start = at;
        Some(payload)
    }
}

fn classify(payload: Vec<u8>) -> Packet {
    match payload.first() {
        Some(0xFE) if payload.len() < 9 => Packet::Eof,
        Some(0xFF) if payload.len() >= 3 => {
            let code = u16::from_le_bytes([payload[1], payload[2]]);
            // "#" and a 5-character SQL state precede the message (protocol 4.1)
            let message = if payload.get(3) == Some(&b'#') && payload.len() >= 9 {
                payload[9..].to_vec()
            } else {
                payload[3..].to_vec()
            };
            Packet::Error(code, message)
        }
        _ => Packet::Row(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut out = vec![n as u8, (n >> 8) as u8, (n >> 16) as u8, 0];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn payloads_are_framed_across_any_split() {
        let mut stream = packet(&[0, 1, 2, 3]);
        stream.extend(packet(&[0xFE, 0, 0, 2, 0]));
        let mut frames = Frames::default();
        for byte in &stream {
            frames.push(std::slice::from_ref(byte));
        }
        assert!(matches!(frames.next_packet(), Some(Packet::Event(p)) if p == [0, 1, 2, 3]));
        assert!(matches!(frames.next_packet(), Some(Packet::Eof)));
        assert!(frames.next_packet().is_none());
    }

    #[test]
    fn a_payload_of_the_largest_size_continues_in_the_next_packet() {
        let mut big = vec![0u8; MAX_PAYLOAD];
        big[1] = 7;
        let mut stream = packet(&big);
        stream.extend(packet(&[9, 9]));
        let mut frames = Frames::default();
        frames.push(&stream[..100]);
        assert!(frames.next_packet().is_none());
        frames.push(&stream[100..]);
        match frames.next_packet() {
            Some(Packet::Event(p)) => {
                assert_eq!(p.len(), MAX_PAYLOAD + 2);
                assert_eq!((p[1], p[MAX_PAYLOAD + 1]), (7, 9));
            }
            _ => panic!("one event expected"),
        }
    }

    #[test]
    fn an_error_packet_carries_its_code_and_message() {
        let mut frames = Frames::default();
        frames.push(&packet(b"\xff\xd4\x04#HY000Could not find GTID"));
        match frames.next_packet() {
            Some(Packet::Error(code, message)) => {
                assert_eq!(code, 1236);
                assert_eq!(message, b"Could not find GTID");
            }
            _ => panic!("an error expected"),
        }
    }
}
